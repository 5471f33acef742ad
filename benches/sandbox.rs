//! Benchmark: what the jail adds to a shell tool call. The same `sh -c true`
//! tool call (cleared environment, pipes, process group, result parsing) runs N
//! times without the jail and N times through it (`roostd __roost-jail`:
//! setsid, rlimits, no_new_privs, close_range, Landlock, seccomp, exec), side
//! by side in one run.
//!
//! `cargo bench -p roostd --bench sandbox -- [N]`
//!
//! `ROOST_BENCH_BASELINE_JAIL=<path>` adds a row for another `roost-jail`
//! (say, one built from an earlier commit) in the same run.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use roostd::policy::CapabilityPolicy;
use roostd::tools::{ProcessContext, ToolRequest, shell};
use tokio_util::sync::CancellationToken;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

async fn measure(ctx: &ProcessContext, n: usize) -> (Duration, Duration) {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let request = ToolRequest {
            data: Some(r#"{"command": "true"}"#.into()),
            log_path: None,
        };
        let t = Instant::now();
        let out = shell::run(request, ctx).await.expect("shell call");
        samples.push(t.elapsed());
        assert!(
            out.data
                .as_deref()
                .is_some_and(|d| d.contains("Exit code: 0")),
            "{:?}",
            out.data
        );
    }
    samples.sort();
    (percentile(&samples, 0.5), percentile(&samples, 0.99))
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(500);
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = CapabilityPolicy::from_manifest(
        serde_yaml::from_str("shell: {allow: [sh]}").expect("caps"),
    )
    .expect("policy");
    let mut ctx = ProcessContext {
        session_id: "ses_bench".into(),
        name: "sh".into(),
        workdir: dir.path().to_path_buf(),
        bookkeeping: dir.path().to_path_buf(),
        tool_output_max_bytes: 0,
        env: Vec::new(),
        policy: Arc::new(policy),
        timeout: Duration::from_secs(30),
        stop: CancellationToken::new(),
        jail_helper: None,
        pids: None,
        identity: None,
        memory_bytes: 128 << 20,
    };
    let support = roostd::sandbox::Support::detect(None);
    println!(
        "sandbox benchmark: {n} shell tool calls each; landlock ABI {:?}, seccomp {}",
        support.landlock_abi, support.seccomp
    );
    let mut rows = Vec::new();
    let jail = roost_jail_binary();
    let helpers = [
        ("without jail", None),
        ("jail via roostd itself", Some(env!("CARGO_BIN_EXE_roostd"))),
        ("jail via roost-jail (default)", Some(jail.as_str())),
    ];
    for (label, helper) in helpers {
        ctx.jail_helper = helper.map(PathBuf::from);
        let (p50, p99) = measure(&ctx, n).await;
        println!(
            "{label:<36} p50 {:>7.0} µs   p99 {:>7.0} µs",
            p50.as_secs_f64() * 1e6,
            p99.as_secs_f64() * 1e6
        );
        rows.push((p50, p99));
    }
    if let Ok(baseline) = std::env::var("ROOST_BENCH_BASELINE_JAIL") {
        ctx.jail_helper = Some(PathBuf::from(&baseline));
        let (b50, b99) = measure(&ctx, n).await;
        println!(
            "{:<36} p50 {:>7.0} µs   p99 {:>7.0} µs",
            "baseline roost-jail",
            b50.as_secs_f64() * 1e6,
            b99.as_secs_f64() * 1e6
        );
    }
    let ((p50, p99), (j50, j99)) = (rows[0], rows[2]);
    println!(
        "added by the jail: p50 {:.2} ms (target ≤ 2 ms), p99 {:.2} ms",
        (j50.as_secs_f64() - p50.as_secs_f64()) * 1e3,
        (j99.as_secs_f64() - p99.as_secs_f64()) * 1e3
    );
    if !support.root {
        println!("not root: tools keep roostd's unprivileged uid; no uid-switch row");
        return;
    }
    // As a root roostd runs them: dropped to the workdir's tool uid, which an
    // ACL entry lets into the workdir (granted once per session, not timed).
    let identity = roostd::sandbox::identity::UidRange::default().for_workdir(dir.path());
    roostd::sandbox::identity::grant(
        dir.path(),
        roostd::sandbox::identity::Grantee::User(identity.uid),
        7,
    )
    .expect("open the workdir to the tool uid");
    ctx.jail_helper = Some(PathBuf::from(&jail));
    ctx.identity = Some(identity);
    let (u50, u99) = measure(&ctx, n).await;
    println!(
        "{:<36} p50 {:>7.0} µs   p99 {:>7.0} µs",
        "roost-jail, as the tool uid",
        u50.as_secs_f64() * 1e6,
        u99.as_secs_f64() * 1e6
    );
    println!(
        "added by the uid switch: p50 {:.2} ms (target ≤ 0.5 ms), p99 {:.2} ms",
        (u50.as_secs_f64() - j50.as_secs_f64()) * 1e3,
        (u99.as_secs_f64() - j99.as_secs_f64()) * 1e3
    );
}

/// `roost-jail` from the same build as this bench (a binary of the
/// `roost-jail` package, which `cargo bench -p roostd` does not build).
fn roost_jail_binary() -> String {
    let path = PathBuf::from(env!("CARGO_BIN_EXE_roostd")).with_file_name("roost-jail");
    assert!(
        path.is_file(),
        "{} is missing: build it first with `cargo build --release -p roost-jail`",
        path.display()
    );
    path.display().to_string()
}
