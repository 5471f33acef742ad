//! A2A 0.3 served in full, end to end with the official A2A Python SDK's 0.3
//! client (a2a-sdk 0.3.24, the last 0.3 release): the card a 0.3 client
//! accepts (`a2a.card_compat: merged`, or a capsule's own), and 0.3's
//! JSON-RPC, HTTP+JSON (`/v1/…`) and gRPC (`a2a.v1.A2AService`) bindings.
//! The control: with the default, 1.0-exact card, the same client refuses
//! the card.

use crate::a2a_script::sdk_python;
use crate::harness::{Daemon, conformance, repo, request};

const SERVE: &str = "{task_acceptance: queue, after_task: sleep, queue_depth: 64, concurrency: 16}";

/// The interpreter with the SDK's 0.3 release: `ROOST_A2A03_PYTHON`, else
/// the venv `scripts/python-sdk` makes.
fn sdk03_python() -> std::path::PathBuf {
    let path = std::env::var_os("ROOST_A2A03_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| repo().join("target/a2a-sdk03-venv/bin/python"));
    assert!(
        path.is_file(),
        "no Python with the A2A SDK 0.3 at {}: run scripts/python-sdk (scripts/test does) or \
         set ROOST_A2A03_PYTHON",
        path.display()
    );
    path
}

async fn start(daemon: &Daemon, name: &str, extra: &str) {
    let dir = conformance(daemon.root.path(), name, SERVE, extra);
    daemon
        .client
        .start(&request(&dir))
        .await
        .unwrap_or_else(|e| panic!("start {name}: {e}\n{}", daemon.log()));
}

/// Runs `script` with `python` against a route; its stdout and stderr.
async fn drive(python: &std::path::Path, script: &str, url: &str, args: &[&str]) -> (bool, String) {
    let out = tokio::process::Command::new(python)
        .arg(repo().join("tests").join("a2a-sdk").join(script))
        .args(["--url", url])
        .args(args)
        .kill_on_drop(true)
        .output()
        .await
        .expect("run the SDK client");
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_3_sdk_client_drives_a_capsule_on_all_three_0_3_bindings() {
    let python = sdk03_python();
    let config = "a2a_listen: 127.0.0.1:0\npool: {max_instances: 300, max_memory_mb: 256}\n\
                  a2a: {card_compat: merged, push: {allow: [127.0.0.1]}, \
                  grpc: {default_route: conformance}}\n";
    let daemon = Daemon::start_with(config, &[]).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    start(&daemon, "conformance", "").await;
    let url = format!("http://{addr}/a2a/conformance");
    for binding in ["jsonrpc", "http_json", "grpc"] {
        let (ok, said) = drive(&python, "client03.py", &url, &["--binding", binding]).await;
        assert!(
            ok && said.contains("9 passed, 0 failed"),
            "the 0.3 SDK client on {binding}:\n{said}\n{}",
            daemon.log()
        );
    }
    // The merged card is still one a 1.0 client reads and uses.
    let (ok, said) = drive(
        &sdk_python(),
        "client.py",
        &url,
        &["--binding", "http_json", "--only", "card,send,stream"],
    )
    .await;
    assert!(
        ok && said.contains("3 passed, 0 failed"),
        "the 1.0 SDK client on the merged card:\n{said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_3_client_refuses_the_exact_card_and_a_capsule_can_ask_for_the_merged_one() {
    let python = sdk03_python();
    let daemon = Daemon::start().await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    start(&daemon, "exact", "").await;
    start(&daemon, "opted", "a2a:\n  card_compat: merged\n").await;
    // The control: 1.0's card, exactly, is not one 0.3's model accepts.
    let exact = format!("http://{addr}/a2a/exact");
    let (ok, said) = drive(
        &python,
        "client03.py",
        &exact,
        &["--binding", "jsonrpc", "--only", "card"],
    )
    .await;
    assert!(
        !ok && said.contains("FAIL card") && said.contains("url"),
        "a 0.3 client should refuse the 1.0-only card (no `url`):\n{said}"
    );
    // The capsule's own `a2a.card_compat: merged` wins over roostd's default.
    let opted = format!("http://{addr}/a2a/opted");
    let (ok, said) = drive(
        &python,
        "client03.py",
        &opted,
        &["--binding", "http_json", "--only", "card,send,parts"],
    )
    .await;
    assert!(
        ok && said.contains("3 passed, 0 failed"),
        "the 0.3 SDK client on a capsule's merged card:\n{said}\n{}",
        daemon.log()
    );
}
