//! Benchmark, two figures of the artifacts issue, each next to its reference in
//! the same run:
//! 1. the per-call cost of a capsule invoking a trivial WASM tool through
//!    `murmur:tool-registry/invoke@0.1.0` (timed inside the guest), next to the
//!    floor: the same tool called by the host directly on the same Engine (a
//!    fresh store from the same `InstancePre`, the same limits);
//! 2. staging a capsule with 10 registry artifacts (resolve, verify sha256, read
//!    the bundle, compile or find in the cache, install into a fresh dir): cold
//!    (fresh Engine, empty caches) and warm (everything compiled).
//!
//! `cargo bench -p roostd --bench artifacts -- [CALLS] [WARM_STAGES]`

#[allow(dead_code)]
#[path = "../tests/e2e/harness.rs"]
mod harness;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use roost_ctl::artifact::{GENERIC_PLATFORM, LocalRegistry, bundle};
use roostd::artifacts::{self, SessionArtifacts};
use roostd::logs::LogSink;
use roostd::manifest::CapsuleManifest;
use roostd::metrics::Metrics;
use roostd::policy::CapabilityPolicy;
use roostd::registry::DirRegistry;
use roostd::runtime::{Runtime, RuntimeConfig, ScriptLaunch, ToolSpec};
use tokio_util::sync::CancellationToken;

const ARTIFACTS: usize = 10;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn summary(label: &str, samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort();
    let (p50, p99) = (percentile(samples, 0.5), percentile(samples, 0.99));
    println!(
        "{label:<44} n={:<6} p50 {:>9.1} µs   p99 {:>9.1} µs",
        samples.len(),
        us(p50),
        us(p99)
    );
    (p50, p99)
}

/// The echo tool's bytes with a custom section appended, so each of the ten
/// artifacts is a distinct component (its own hash, its own compile).
fn variant(base: &[u8], i: usize) -> Vec<u8> {
    let name = b"roost-bench";
    let payload = format!("variant {i}");
    let body_len = 1 + name.len() + payload.len();
    let mut bytes = base.to_vec();
    bytes.push(0); // custom section
    bytes.push(u8::try_from(body_len).expect("small section"));
    bytes.push(u8::try_from(name.len()).expect("small name"));
    bytes.extend_from_slice(name);
    bytes.extend_from_slice(payload.as_bytes());
    bytes
}

fn runtime(cache: &Path) -> Runtime {
    Runtime::new(
        &RuntimeConfig {
            max_instances: 100,
            max_memory_bytes: 256 << 20,
            cache_dir: cache.to_path_buf(),
        },
        Arc::new(Metrics::default()),
    )
    .expect("runtime")
}

fn spec(dir: &Path, policy: &Arc<CapabilityPolicy>) -> ToolSpec {
    ToolSpec {
        session_id: "ses_bench".into(),
        capsule: "bench".into(),
        workdir: dir.to_path_buf(),
        bookkeeping: dir.to_path_buf(),
        env: vec![("MURMUR_SESSION_ID".into(), "ses_bench".into())],
        timeout: Duration::from_secs(60),
        memory_bytes: 128 << 20,
        policy: Arc::clone(policy),
        log: LogSink::new(&dir.join("logs"), 1 << 20),
        stop: CancellationToken::new(),
        processes: Arc::new(roostd::tools::SessionProcesses::unjailed(
            dir,
            Arc::clone(policy),
            Duration::from_secs(60),
        )),
        notes: None,
        task: None,
    }
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let calls: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let warm_stages: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200);
    let root = tempfile::tempdir().expect("tempdir");
    let echo = std::fs::read(harness::guest("echo_tool")).expect("echo tool");

    // Ten distinct WASM tools in a local registry; `echo-tool` is the one invoked.
    let registry_dir = root.path().join("registry");
    let local = LocalRegistry::new(&registry_dir);
    let mut names = vec!["echo-tool".to_string()];
    names.extend((1..ARTIFACTS).map(|i| format!("pad-{i}")));
    for (i, name) in names.iter().enumerate() {
        let manifest = format!("name: {name}\nversion: 1.0.0\nruntime: tool\n");
        let dir =
            harness::artifact_dir(root.path(), &manifest, "component.wasm", &variant(&echo, i));
        let (manifest, bytes) = bundle::pack(&dir).expect("pack");
        local
            .publish(&manifest, &bytes, GENERIC_PLATFORM)
            .expect("publish");
    }
    let artifacts_yaml: String = names
        .iter()
        .map(|n| format!("  - {{name: {n}, version: 1.0.0, runtime: tool}}\n"))
        .collect();
    let capsule = harness::capsule(
        root.path(),
        "bench",
        "invoker",
        &format!(
            "artifacts:\n{artifacts_yaml}tools: [{}]\n",
            names.join(", ")
        ),
    );
    let manifest = CapsuleManifest::load(&capsule).expect("manifest");
    let registry = Arc::new(DirRegistry(local.clone()));
    let policy = Arc::new(CapabilityPolicy::default());

    println!(
        "artifacts benchmark: {calls} tool calls, {ARTIFACTS} artifacts, {warm_stages} warm stages"
    );

    // Cold: a fresh Engine with empty memory and disk caches.
    let cold_rt = runtime(&root.path().join("cold-cache"));
    let t = Instant::now();
    let staged = artifacts::stage(
        &cold_rt,
        &Arc::default(),
        &*registry,
        &manifest,
        64 << 20,
        &|_, _| {},
    )
    .await
    .expect("cold stage");
    let cold_resolve = t.elapsed();
    let dir = root.path().join("cold-install");
    artifacts::install(&dir, &dir, &staged.items, &[]).expect("install");
    let cold_total = t.elapsed();
    println!(
        "stage {ARTIFACTS} artifacts, cold (compile all)        {:>9.1} ms (resolve+verify+compile {:.1} ms)",
        cold_total.as_secs_f64() * 1e3,
        cold_resolve.as_secs_f64() * 1e3
    );
    drop(cold_rt);
    // After a daemon restart: a fresh Engine, compiled components on disk.
    let restart_rt = runtime(&root.path().join("cold-cache"));
    let t = Instant::now();
    let staged = artifacts::stage(
        &restart_rt,
        &Arc::default(),
        &*registry,
        &manifest,
        64 << 20,
        &|_, _| {},
    )
    .await
    .expect("restart stage");
    let dir = root.path().join("restart-install");
    artifacts::install(&dir, &dir, &staged.items, &[]).expect("install");
    println!(
        "stage {ARTIFACTS} artifacts, after a restart (disk cache) {:>9.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    drop(restart_rt);

    // Warm: the same Engine again and again.
    let rt = runtime(&root.path().join("cache"));
    let memo = Arc::default();
    let staged = artifacts::stage(&rt, &memo, &*registry, &manifest, 64 << 20, &|_, _| {})
        .await
        .expect("first stage");
    let mut warm = Vec::with_capacity(warm_stages);
    let mut resolve_only = Vec::with_capacity(warm_stages);
    for i in 0..warm_stages {
        let t = Instant::now();
        let again = artifacts::stage(&rt, &memo, &*registry, &manifest, 64 << 20, &|_, _| {})
            .await
            .expect("warm stage");
        resolve_only.push(t.elapsed());
        let dir = root.path().join(format!("warm-{i}"));
        artifacts::install(&dir, &dir, &again.items, &[]).expect("install");
        warm.push(t.elapsed());
    }
    summary(
        "  of which resolve, verify, cache lookup",
        &mut resolve_only,
    );
    let (warm_p50, _) = summary(
        &format!("stage {ARTIFACTS} artifacts, warm (incl. install)"),
        &mut warm,
    );

    // Per-call: the invoker capsule calls echo-tool `calls` times, timing each in the guest.
    let workdir = root.path().join("work");
    std::fs::create_dir_all(&workdir).expect("workdir");
    std::fs::write(workdir.join("invoke-count.txt"), calls.to_string()).expect("count");
    let session_artifacts = Arc::new(SessionArtifacts::new(
        staged.items.clone(),
        registry.clone(),
        workdir.clone(),
        workdir.clone(),
        staged.lock_path.clone(),
        64 << 20,
        Box::new(|_| {}),
    ));
    let tools = rt.session_tools(
        spec(&workdir, &policy),
        names.iter().cloned().collect(),
        session_artifacts,
    );
    let roostd::manifest::CapsuleKind::Script { component, .. } = &manifest.kind else {
        panic!("the bench capsule is a script capsule");
    };
    let file = std::fs::File::open(component).expect("the component");
    let prepared = rt.prepare(component, file).await.expect("capsule");
    let launch = ScriptLaunch {
        session_id: "ses_bench".into(),
        workdir: workdir.clone(),
        env: Vec::new(),
        timeout: Duration::from_secs(600),
        memory_bytes: 128 << 20,
        policy: Arc::clone(&policy),
        log: LogSink::new(&workdir.join("logs"), 1 << 20),
        tools: Some(tools),
        notes: None,
    };
    rt.run_script(&prepared, launch, CancellationToken::new())
        .await
        .expect("invoker run");
    let mut via_invoke: Vec<Duration> = std::fs::read_to_string(workdir.join("invoke-timings.txt"))
        .expect("timings")
        .lines()
        .map(|l| Duration::from_nanos(l.parse().expect("nanos")))
        .collect();

    // Floor: the host calls the same prepared tool directly.
    let tool = rt
        .prepare_tool("echo-tool", variant(&echo, 0))
        .await
        .expect("tool");
    let floor_spec = spec(&workdir, &policy);
    let mut floor = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = Instant::now();
        let data = rt
            .call_tool_data(&tool, "echo-tool", Some("ping".into()), &floor_spec)
            .await
            .expect("floor call");
        floor.push(t.elapsed());
        assert_eq!(data.as_deref(), Some("ping"));
    }
    let (f50, f99) = summary("floor: host calls the tool directly", &mut floor);
    let (i50, i99) = summary("capsule -> invoke -> WASM tool", &mut via_invoke);
    println!(
        "ratio invoke/floor                           p50 {:.2}x   p99 {:.2}x   (target ≤ 5x)",
        i50.as_secs_f64() / f50.as_secs_f64(),
        i99.as_secs_f64() / f99.as_secs_f64()
    );
    println!(
        "warm 10-artifact stage p50 {:.2} ms (target < 5 ms)",
        warm_p50.as_secs_f64() * 1e3
    );
}
