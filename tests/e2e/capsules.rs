//! Script capsules: hello, each failure class, environment and filesystem
//! isolation, the network allow-list, workdir semantics and log capture.

use std::io::{Read, Write};
use std::net::TcpListener;

use roost_ctl::api::{SessionState, StartRequest};
use serde_json::Value;

use crate::harness::{Daemon, capsule, code, request};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_completes_writes_its_file_and_logs_its_identity() {
    let d = Daemon::start().await;
    let cap = capsule(d.root.path(), "hello", "hello", "");
    let s = d.run_to_end(&cap).await;
    assert_eq!(s.state, SessionState::Completed, "{s:?}");
    assert_eq!(s.error, None);
    assert!(s.id.starts_with("ses_") && s.id.len() == 36, "{}", s.id);
    assert_eq!(s.name, "hello");
    assert_eq!(s.capsule, "hello");
    assert!(s.ended_at.is_some());
    let file = std::path::Path::new(&s.workdir).join("hello.txt");
    assert_eq!(std::fs::read_to_string(file).expect("hello.txt"), "hello\n");
    let mut logs = Vec::new();
    d.client
        .logs(&s.id, false, |c| logs.extend_from_slice(c))
        .await
        .expect("logs");
    let logs = String::from_utf8(logs).expect("utf8");
    assert!(
        logs.contains(&format!("hello from hello session {}", s.id)),
        "{logs}"
    );
    assert!(
        !d.log().contains("hello from hello"),
        "guest output leaked into the daemon log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runaway_loop_hits_the_deadline() {
    let d = Daemon::start().await;
    let cap = capsule(
        d.root.path(),
        "spin",
        "spin",
        "capabilities: {limits: {timeout_secs: 1}}\n",
    );
    let s = d.run_to_end(&cap).await;
    assert_eq!(s.state, SessionState::Failed);
    assert_eq!(s.error.as_deref(), Some("deadline exceeded after 1 s"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_bomb_hits_the_resource_limit() {
    let d = Daemon::start().await;
    let cap = capsule(
        d.root.path(),
        "bomb",
        "membomb",
        "capabilities: {limits: {memory_mb: 32}}\n",
    );
    let s = d.run_to_end(&cap).await;
    assert_eq!(s.state, SessionState::Failed);
    let error = s.error.expect("error");
    assert!(error.starts_with("resource limit: memory"), "{error}");
    assert!(error.contains("limit is 32 MiB"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panic_is_a_trap_with_the_guest_message() {
    let d = Daemon::start().await;
    let cap = capsule(d.root.path(), "panic", "panic", "");
    let s = d.run_to_end(&cap).await;
    assert_eq!(s.state, SessionState::Failed);
    let error = s.error.expect("error");
    assert!(error.starts_with("trap: "), "{error}");
    assert!(error.contains("capsule exploded on purpose"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unversioned_export_is_refused_naming_the_versioned_one() {
    let d = Daemon::start().await;
    let cap = capsule(d.root.path(), "old", "unversioned", "");
    let err = d.client.start(&request(&cap)).await.expect_err("refused");
    assert_eq!(code(&err), "invalid_component");
    assert!(
        err.to_string().contains("murmur:capsule/run@0.1.0"),
        "{err}"
    );
    assert!(
        d.client.list(true).await.expect("list").is_empty(),
        "no row created"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guests_see_only_allowed_env_identity_and_their_workdir() {
    let d = Daemon::start_with(
        crate::harness::TEST_CONFIG,
        &[
            ("PROBE_VISIBLE", "yes"),
            ("PROBE_HIDDEN", "no"),
            ("SERVICE_TOKEN_X", "s3cret"),
        ],
    )
    .await;
    let cap = capsule(
        d.root.path(),
        "probe",
        "envprobe",
        "capabilities: {env: {allow: [PROBE_VISIBLE, NOT_SET_ANYWHERE]}}\n",
    );
    let workdir = d.root.path().join("userdir");
    std::fs::create_dir(&workdir).expect("workdir");
    std::fs::write(workdir.join("existing.txt"), "x").expect("file");
    let s = d
        .client
        .start(&StartRequest {
            workdir: Some(workdir.display().to_string()),
            ..request(&cap)
        })
        .await
        .expect("start");
    let s = d.client.wait(&s.id).await.expect("wait");
    assert_eq!(s.state, SessionState::Completed, "{s:?}");
    assert_eq!(s.workdir, workdir.display().to_string());
    let bookkeeping = workdir.join(".murmur").join(&s.id);
    assert_eq!(s.bookkeeping_dir, bookkeeping.display().to_string());
    assert!(bookkeeping.join("logs").join("guest.log").is_file());

    let probe: Value =
        serde_json::from_str(&std::fs::read_to_string(workdir.join("probe.json")).expect("probe"))
            .expect("json");
    let env = probe["env"].as_object().expect("env map");
    let mut keys: Vec<&str> = env.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "MURMUR_CAPSULE_NAME",
            "MURMUR_CAPSULE_URL",
            "MURMUR_CAPSULE_VERSION",
            "MURMUR_SESSION_ID",
            "PROBE_VISIBLE"
        ]
    );
    assert_eq!(env["PROBE_VISIBLE"], "yes");
    assert_eq!(env["MURMUR_SESSION_ID"], s.id.as_str());
    assert_eq!(env["MURMUR_CAPSULE_VERSION"], "0.1.0");
    let health = d.client.health().await.expect("health");
    assert_eq!(
        env["MURMUR_CAPSULE_URL"],
        format!("http://{}/a2a/probe", health.a2a_addr).as_str()
    );
    let preopens: Vec<&str> = probe["preopens"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(preopens.contains(&"existing.txt"), "{preopens:?}");
    let etc = probe["read_etc_passwd"].as_str().expect("str");
    assert!(etc.starts_with("err:"), "host /etc/passwd readable: {etc}");
    let parent = probe["read_parent"].as_str().expect("str");
    assert!(parent.starts_with("err:"), "parent dir readable: {parent}");
    let root: Vec<&str> = probe["root_entries"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        !root.contains(&"etc") && !root.contains(&"proc"),
        "{root:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credential_shaped_env_allow_is_refused() {
    let d = Daemon::start().await;
    let cap = capsule(
        d.root.path(),
        "leaky",
        "envprobe",
        "capabilities: {env: {allow: [OPENAI_API_KEY]}}\n",
    );
    let err = d.client.start(&request(&cap)).await.expect_err("refused");
    assert_eq!(code(&err), "invalid_manifest");
    assert!(err.to_string().contains("OPENAI_API_KEY"), "{err}");
}

/// A tiny HTTP server on loopback that answers every request with 200.
fn http_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(16) {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outgoing_http_is_denied_unless_allow_listed() {
    let port = http_server();
    let url = format!("http://127.0.0.1:{port}/hello");
    let d = Daemon::start_with(crate::harness::TEST_CONFIG, &[("PROBE_URLS", &url)]).await;
    let allowed = capsule(
        d.root.path(),
        "net-allowed",
        "netprobe",
        &format!(
            "capabilities: {{env: {{allow: [PROBE_URLS]}}, network: {{allow: [\"http://127.0.0.1:{port}\"]}}}}\n"
        ),
    );
    let denied = capsule(
        d.root.path(),
        "net-denied",
        "netprobe",
        "capabilities: {env: {allow: [PROBE_URLS]}, network: {allow: [\"http://127.0.0.1:1\"]}}\n",
    );
    for (cap, expect) in [(&allowed, "status:200"), (&denied, "HttpRequestDenied")] {
        let s = d.run_to_end(cap).await;
        assert_eq!(s.state, SessionState::Completed, "{s:?}");
        let net: Value = serde_json::from_str(
            &std::fs::read_to_string(std::path::Path::new(&s.workdir).join("net.json"))
                .expect("net.json"),
        )
        .expect("json");
        let result = net[&url].as_str().expect("result for url");
        assert!(result.contains(expect), "{}: {result}", cap.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_output_is_bounded_and_rotated() {
    let d = Daemon::start_with(
        &format!(
            "{}logs: {{max_bytes: 65536}}\n",
            crate::harness::TEST_CONFIG
        ),
        &[],
    )
    .await;
    let cap = capsule(d.root.path(), "loud", "loud", "");
    let s = d.run_to_end(&cap).await;
    assert_eq!(s.state, SessionState::Completed, "{s:?}");
    let logs_dir = std::path::Path::new(&s.bookkeeping_dir).join("logs");
    let live = std::fs::metadata(logs_dir.join("guest.log"))
        .expect("live")
        .len();
    let rotated = std::fs::metadata(logs_dir.join("guest.log.1"))
        .expect("rotated")
        .len();
    assert!(live <= 65536 && rotated <= 65536, "{live} {rotated}");
    let mut logs = Vec::new();
    d.client
        .logs(&s.id, false, |c| logs.extend_from_slice(c))
        .await
        .expect("logs");
    let text = String::from_utf8(logs).expect("utf8");
    let last = text.lines().last().expect("some output");
    assert!(last.starts_with("line 20000 "), "last line kept: {last}");
    assert!(!text.contains("line 1 "), "oldest output rotated away");
}

/// Runs the `filler` guest with `extra` in its manifest, growing each of its
/// files to `size` bytes; returns its `fill.json` and the workdir.
async fn fill(d: &Daemon, extra: &str, size: u64) -> (Value, std::path::PathBuf) {
    let cap = capsule(d.root.path(), "filler", "filler", extra);
    let workdir = d.root.path().join(format!("fill-{size}-{}", extra.len()));
    std::fs::create_dir(&workdir).expect("workdir");
    std::fs::write(workdir.join("fill-size.txt"), size.to_string()).expect("size");
    let s = d
        .client
        .start(&StartRequest {
            workdir: Some(workdir.display().to_string()),
            ..request(&cap)
        })
        .await
        .expect("start");
    let s = d.client.wait(&s.id).await.expect("wait");
    assert_eq!(s.state, SessionState::Completed, "{s:?}");
    let out = std::fs::read_to_string(workdir.join("fill.json")).expect("fill.json");
    (serde_json::from_str(&out).expect("json"), workdir)
}

/// Every way a WASM guest can grow a file: what `fill.json` names each.
const FILLS: [(&str, &str); 5] = [
    ("write", "write.bin"),
    ("stream", "stream.bin"),
    ("append", "append.bin"),
    ("set_size", "set-size.bin"),
    ("std", "std.bin"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guests_files_are_held_to_the_capsules_largest_file_limit() {
    let d = Daemon::start().await;
    let limit = 1u64 << 20;
    let bounded = format!("capabilities: {{limits: {{output_bytes: {limit}}}}}\n");
    // The attack: grow each file to twice the limit.
    let (out, workdir) = fill(&d, &bounded, 2 * limit).await;
    for (how, file) in FILLS {
        let outcome = out[how].as_str().expect(how);
        // std goes through wasi-libc, which reports a failed stream write
        // as EIO; the WASI calls themselves say why.
        let refused = match how {
            "std" => outcome.starts_with("err:"),
            _ => outcome == "err:file-too-large",
        };
        assert!(refused, "{how}: {outcome}");
        let len = std::fs::metadata(workdir.join(file)).map_or(0, |m| m.len());
        assert!(len <= limit, "{how} grew {file} to {len} bytes");
    }
    // Control: the same guest under the default limit (256 MiB) grows every
    // file to twice this capsule's limit, so the refusal above is the limit's.
    let (out, workdir) = fill(&d, "", 2 * limit).await;
    // And under the limit, up to it exactly.
    let (exact, exact_dir) = fill(&d, &bounded, limit).await;
    for (how, file) in FILLS {
        assert_eq!(out[how], "ok", "{how} without the limit: {out}");
        let len = std::fs::metadata(workdir.join(file)).expect(file).len();
        assert_eq!(len, 2 * limit, "{how}");
        assert_eq!(exact[how], "ok", "{how} at the limit: {exact}");
        let len = std::fs::metadata(exact_dir.join(file)).expect(file).len();
        assert_eq!(len, limit, "{how}");
    }
}
