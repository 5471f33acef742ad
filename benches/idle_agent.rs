//! The idle agent the memory benchmarks start by the thousand (`idle.rs`,
//! `cluster_scale.rs`): `queue` + `sleep`, the OpenAI driver from the
//! daemon's registry, a model that is never called; and a process's RSS.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use roost_ctl::api::{RestartPolicy, StartRequest};

use crate::harness::{Daemon, artifact_dir, openai_driver, publish, request};
use crate::mock_llm::MockLlm;

/// `VmRSS` of a process, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// What of `pid`'s resident memory is anonymous (heap, stacks) and what
/// file-backed (the executable, mapped database pages), in KiB.
pub fn rss_parts_kib(pid: u32) -> (u64, u64) {
    (status_kib(pid, "RssAnon:"), status_kib(pid, "RssFile:"))
}

/// The most `pid` has had resident since it started, in KiB.
pub fn peak_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:")
}

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The idle agent capsule, its driver published to `daemon`'s registry.
pub async fn capsule(daemon: &Daemon, mock: &MockLlm) -> PathBuf {
    let registry = daemon.state_dir.join("registry");
    let (driver_manifest, driver) = openai_driver();
    let dir = artifact_dir(
        daemon.root.path(),
        &driver_manifest,
        "component.wasm",
        &driver,
    );
    publish(&registry, &dir).await;
    let capsule = daemon.root.path().join("idle");
    std::fs::create_dir_all(&capsule).expect("dir");
    std::fs::write(
        capsule.join("murmur.yaml"),
        format!(
            "name: idle\nversion: 0.1.0\n\
             artifacts:\n  - {{name: openai-driver, version: 0.1.0, runtime: driver}}\n\
             capabilities: {{network: {{allow: [\"http://127.0.0.1:{port}\"]}}}}\n\
             inference:\n  endpoint: {endpoint}\n  model: bench\n\
             \x20 driver: {{artifact: openai-driver}}\n\
             lifecycle: {{task_acceptance: queue, after_task: sleep}}\n",
            port = mock.port,
            endpoint = mock.endpoint(),
        ),
    )
    .expect("manifest");
    capsule
}

/// Clients starting sessions at once.
const CLIENTS: usize = 16;

/// Starts `n` sessions named `<prefix>-<i>` on `daemon` (on node `node`
/// of its cluster, when given) through the control API, 16 clients at
/// once; the seconds it took.
pub async fn start_all(
    daemon: &Daemon,
    capsule: &Path,
    prefix: &str,
    n: usize,
    restart: RestartPolicy,
    node: Option<&str>,
) -> f64 {
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (client, next, capsule, prefix, node) = (
                daemon.client.clone(),
                Arc::clone(&next),
                capsule.to_path_buf(),
                prefix.to_string(),
                node.map(str::to_string),
            );
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return;
                    }
                    client
                        .start(&StartRequest {
                            name: Some(format!("{prefix}-{i}")),
                            restart,
                            node: node.clone(),
                            ..request(&capsule)
                        })
                        .await
                        .unwrap_or_else(|e| panic!("start {prefix}-{i}: {e}"));
                }
            })
        })
        .collect();
    for client in clients {
        client.await.expect("client");
    }
    started.elapsed().as_secs_f64()
}
