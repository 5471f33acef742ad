//! Artifacts end to end: published with roostctl, verified against sha256 and
//! murmur.lock, installed, compiled once, and used by real guests through
//! `invoke` and `manage`.

use std::path::{Path, PathBuf};

use roost_ctl::api::SessionState;
use serde_json::Value;

use crate::harness::{Daemon, TEST_CONFIG, artifact_dir, capsule, code, guest, publish, request};

pub(crate) const ECHO: &str = "name: echo-tool\nversion: 1.0.0\nruntime: tool\n\
description: Echo text back\ntags: [text, demo]\n\
input_schema: {type: object, properties: {text: {type: string}}}\n";

const ENVDUMP_SCRIPT: &[u8] = b"#!/bin/sh\ninput=$(cat)\necho \"input=$input\"\nenv | sort\n";

pub(crate) fn wasm(name: &str) -> Vec<u8> {
    std::fs::read(guest(name)).expect("guest bytes")
}

/// Publishes echo-tool, envdump (native), guide (skill), stage-hook (hook) and
/// late-tool 1.0.0 and 2.0.0 into `registry`.
async fn publish_all(root: &Path, registry: &Path) {
    let echo = wasm("echo_tool");
    let hook = wasm("stage_hook");
    let dirs = [
        artifact_dir(root, ECHO, "component.wasm", &echo),
        artifact_dir(
            root,
            "name: envdump\nversion: 1.0.0\nruntime: tool\nimplementation: native\ndescription: Print the environment\n",
            "envdump",
            ENVDUMP_SCRIPT,
        ),
        artifact_dir(
            root,
            "name: guide\nversion: 1.0.0\nruntime: skill\ndescription: How to use the tools\n",
            "skill.md",
            b"# Guide\nAlways echo twice.\n",
        ),
        artifact_dir(
            root,
            "name: stage-hook\nversion: 1.0.0\nruntime: hook\nhook: {binding: on-stage}\n",
            "component.wasm",
            &hook,
        ),
        artifact_dir(
            root,
            "name: late-tool\nversion: 1.0.0\nruntime: tool\ndescription: A late echo\n",
            "component.wasm",
            &echo,
        ),
        artifact_dir(
            root,
            "name: late-tool\nversion: 2.0.0\nruntime: tool\ndescription: A later echo\n",
            "component.wasm",
            &echo,
        ),
    ];
    for dir in dirs {
        let out = publish(registry, &dir).await;
        assert!(out.contains("published"), "{out}");
    }
}

fn report(workdir: &str) -> std::collections::HashMap<String, Value> {
    let text = std::fs::read_to_string(Path::new(workdir).join("report.jsonl"))
        .expect("toolbox wrote report.jsonl");
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("json line");
            (v["step"].as_str().expect("step").to_string(), v)
        })
        .collect()
}

fn toolbox_capsule(root: &Path, name: &str) -> PathBuf {
    let dir = capsule(
        root,
        name,
        "toolbox",
        "artifacts:\n\
         \x20 - {name: echo-tool, version: 1.0.0, runtime: tool}\n\
         \x20 - {name: envdump, version: 1.0.0, runtime: tool}\n\
         \x20 - {name: guide, version: 1.0.0, runtime: skill}\n\
         \x20 - {name: stage-hook, version: 1.0.0, runtime: hook}\n\
         \x20 - {name: notes, version: local, runtime: skill, source: notes}\n\
         tools: [echo-tool, envdump, guide, notes, sh, late-tool, stage-hook]\n\
         capabilities:\n\
         \x20 shell: {allow: [sh], strip_env: [\"ROOST_E2E_STRIP_*\"]}\n\
         \x20 env: {allow: [ROOST_E2E_VISIBLE, ROOST_E2E_STRIP_ME]}\n\
         \x20 limits: {timeout_secs: 20}\n",
    );
    std::fs::create_dir_all(dir.join("notes")).expect("notes dir");
    std::fs::write(
        dir.join("notes").join("SKILL.md"),
        "# Notes\nLocal guidance.\n",
    )
    .expect("skill");
    dir
}

#[tokio::test]
async fn a_capsule_invokes_every_kind_and_manages_artifacts_at_run_time() {
    let daemon = Daemon::start_with(
        TEST_CONFIG,
        &[
            ("ROOST_E2E_VISIBLE", "yes"),
            ("ROOST_E2E_STRIP_ME", "hidden"),
        ],
    )
    .await;
    let registry = daemon.state_dir.join("registry");
    publish_all(daemon.root.path(), &registry).await;
    let dir = toolbox_capsule(daemon.root.path(), "toolbox");
    let session = daemon.run_to_end(&dir).await;
    assert_eq!(
        session.state,
        SessionState::Completed,
        "{session:?}\n{}",
        daemon.log()
    );
    let r = report(&session.workdir);

    let echo = &r["echo"];
    assert_eq!(echo["ok"], true, "{echo}");
    assert_eq!(echo["value"]["data"], "hello tools");
    assert_eq!(echo["value"]["status"], "passed");

    // Native tool: JSON input on stdin, cleared environment, synthetic HOME.
    let native = r["native"]["value"]["data"].as_str().expect("native data");
    assert!(
        native.contains(r#"input={"data":"native input","log_path":null}"#),
        "{native}"
    );
    assert!(
        native.contains(&format!("HOME={}/.capsule-home", session.workdir)),
        "{native}"
    );
    assert!(native.contains("ROOST_E2E_VISIBLE=yes"), "{native}");
    assert!(
        !native.contains("ROOST_E2E_STRIP_ME"),
        "strip_env must apply: {native}"
    );
    assert!(
        native.contains(&format!("MURMUR_SESSION_ID={}", session.id)),
        "{native}"
    );
    assert!(
        !native.contains("RUST_LOG="),
        "host env must not leak: {native}"
    );

    assert_eq!(r["skill"]["value"]["data"], "# Guide\nAlways echo twice.\n");
    assert_eq!(
        r["local-skill"]["value"]["data"],
        "# Notes\nLocal guidance.\n"
    );

    let shell = r["shell"]["value"]["data"].as_str().expect("shell data");
    assert!(
        shell.contains("shell-ok") && shell.contains("to-stderr"),
        "{shell}"
    );
    assert_eq!(r["shell"]["value"]["status"], "passed");
    let big = &r["shell-big"]["value"];
    assert_eq!(big["truncated"], true, "{big}");
    let path = big["data_path"].as_str().expect("full output path");
    let full = std::fs::read_to_string(Path::new(&session.workdir).join(path)).expect("full");
    assert!(full.contains("line-2999-"), "full output must be complete");

    let undeclared = &r["undeclared"];
    assert_eq!(undeclared["ok"], false);
    assert!(
        undeclared["value"]
            .as_str()
            .expect("message")
            .contains("not declared in manifest allowlist"),
        "{undeclared}"
    );
    assert!(
        r["hook-as-tool"]["value"]
            .as_str()
            .expect("msg")
            .contains("hook artifact, not a tool")
    );
    let trap = r["tool-trap"]["value"].as_str().expect("trap message");
    assert!(
        trap.contains("tool 'echo-tool' failed: trap") && trap.contains("asked to panic"),
        "{trap}"
    );

    let list = r["list"]["value"].to_string();
    for entry in [
        r#"["echo-tool","1.0.0","wasm"]"#,
        r#"["envdump","1.0.0","native"]"#,
        r#"["guide","1.0.0","wasm"]"#,
        r#"["sh","0.0.0","native"]"#,
    ] {
        assert!(list.contains(entry), "{entry} in {list}");
    }
    assert!(!list.contains("stage-hook"), "hooks are not tools: {list}");
    let describe = &r["describe"]["value"];
    assert_eq!(describe["description"], "Echo text back");
    assert_eq!(describe["tags"], serde_json::json!(["text", "demo"]));
    assert_eq!(
        describe["input_schema"],
        r#"{"type":"object","properties":{"text":{"type":"string"}}}"#
    );
    assert!(
        r["describe-shell"]["value"]["input_schema"]
            .as_str()
            .expect("schema")
            .contains("command")
    );
    assert_eq!(
        r["search"]["value"],
        serde_json::json!([
            ["late-tool", "1.0.0", "wasm"],
            ["late-tool", "2.0.0", "wasm"]
        ])
    );
    assert!(
        r["late-before"]["value"]
            .as_str()
            .expect("msg")
            .contains("not installed")
    );
    assert_eq!(
        r["pull"]["value"],
        serde_json::json!(["late-tool", "1.0.0"])
    );
    assert_eq!(r["late-after"]["value"]["data"], "pulled and called");
    let conflict = r["pull-conflict"]["value"].as_str().expect("conflict");
    assert!(
        conflict.contains("murmur.lock conflict for 'late-tool'")
            && conflict.contains("late-tool@1.0.0")
            && conflict.contains("late-tool@2.0.0"),
        "{conflict}"
    );
    assert!(
        r["remove-declared"]["value"]
            .as_str()
            .expect("msg")
            .contains("declared in murmur.yaml")
    );
    assert_eq!(r["remove-pulled"]["value"], true);
    assert_eq!(r["remove-again"]["value"], false);
    assert!(
        r["late-removed"]["value"]
            .as_str()
            .expect("msg")
            .contains("not installed")
    );
    let diag = &r["diagnostics"]["value"];
    assert_eq!(diag["capsule_id"], session.id.as_str());
    assert!(
        diag["capabilities"]
            .as_str()
            .expect("caps")
            .contains("\"shell_allow\":[\"sh\"]")
    );

    // Installed layout in the bookkeeping dir.
    let tools = Path::new(&session.bookkeeping_dir).join("tools");
    for file in [
        "echo-tool/murmur.yaml",
        "envdump/murmur.yaml",
        "guide/skill.md",
        "notes/skill.md",
        "sh/murmur.yaml",
    ] {
        assert!(tools.join(file).is_file(), "{file} installed");
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(tools.join("envdump/envdump"))
        .expect("binary")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    assert!(
        !tools.join("late-tool").exists(),
        "removed artifact is uninstalled"
    );

    // The lock pins every registry artifact (the pull was undone by remove).
    let lock = std::fs::read_to_string(dir.join("murmur.lock")).expect("lock written");
    for name in ["echo-tool", "envdump", "guide", "stage-hook"] {
        assert!(lock.contains(&format!("name: {name}")), "{name} in {lock}");
    }
    assert!(
        !lock.contains("late-tool") && !lock.contains("notes"),
        "{lock}"
    );
    // The on-stage hook ran in the workdir.
    let events = std::fs::read_to_string(Path::new(&session.workdir).join("hook-events.txt"));
    assert_eq!(events.expect("hook ran").trim(), "stage");

    // `status` shows installed artifacts with versions and hashes.
    let status = daemon.client.get(&session.id).await.expect("status");
    let names: Vec<_> = status.artifacts.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(
        names,
        ["echo-tool", "envdump", "guide", "stage-hook", "notes"]
    );
    assert!(
        status.artifacts[0]
            .sha256
            .as_ref()
            .is_some_and(|s| s.len() == 64)
    );
    assert_eq!(status.artifacts[4].origin, "local");
    let text = cli_output(&daemon, &["status", &session.id]).await;
    let echo_row = text
        .lines()
        .find(|l| l.trim_start().starts_with("echo-tool"))
        .unwrap_or_else(|| panic!("no echo-tool row in\n{text}"));
    assert!(
        echo_row.contains("1.0.0")
            && echo_row.contains("tool wasm")
            && echo_row.contains(status.artifacts[0].sha256.as_deref().unwrap_or("?")),
        "{echo_row}"
    );
}

/// Runs a roostctl command against `daemon` through the CLI code.
async fn cli_output(daemon: &Daemon, args: &[&str]) -> String {
    use clap::Parser;
    let socket = daemon.socket.display().to_string();
    let mut argv = vec!["roostctl", "--socket", socket.as_str()];
    argv.extend_from_slice(args);
    let cli = roost_ctl::cli::Cli::try_parse_from(argv).expect("parse");
    let mut out = Vec::new();
    let code = roost_ctl::cli::run(cli, &mut out).await.expect("run");
    assert_eq!(code, 0);
    String::from_utf8(out).expect("utf-8")
}

pub(crate) fn invoker_capsule(root: &Path, name: &str) -> PathBuf {
    capsule(
        root,
        name,
        "invoker",
        "artifacts: [{name: echo-tool, version: 1.0.0, runtime: tool}]\ntools: [echo-tool]\n",
    )
}

/// Publishes one artifact into the daemon's default registry.
async fn publish_one(daemon: &Daemon, manifest: &str, payload: &str, bytes: &[u8]) {
    let dir = artifact_dir(daemon.root.path(), manifest, payload, bytes);
    publish(&daemon.state_dir.join("registry"), &dir).await;
}

async fn publish_echo(daemon: &Daemon) -> PathBuf {
    publish_one(daemon, ECHO, "component.wasm", &wasm("echo_tool")).await;
    daemon.state_dir.join("registry")
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[tokio::test]
async fn lock_mismatches_are_three_distinct_errors_and_write_nothing() {
    let daemon = Daemon::start().await;
    publish_echo(&daemon).await;
    let dir = invoker_capsule(daemon.root.path(), "locked");
    // A first run writes the lock.
    let first = daemon.run_to_end(&dir).await;
    assert_eq!(first.state, SessionState::Completed, "{first:?}");
    let good = std::fs::read_to_string(dir.join("murmur.lock")).expect("lock");
    let sha = good
        .lines()
        .find_map(|l| l.trim().strip_prefix("sha256: "))
        .expect("sha line")
        .to_string();
    let sessions_before = daemon.client.list(true).await.expect("list").len();
    let capsule_files = entries(&dir);
    for (lock, code_expected, needle) in [
        (
            "lock_version: 1\nartifacts: []\n".to_string(),
            "lock_missing_entry",
            "has no entry for artifact `echo-tool`",
        ),
        (
            good.replace("version: 1.0.0", "version: 0.9.0"),
            "lock_version_mismatch",
            "asks for version 1.0.0 but murmur.lock pins 0.9.0",
        ),
        (
            good.replace(&sha, &"0".repeat(64)),
            "lock_hash_mismatch",
            "murmur.lock pins 0000",
        ),
    ] {
        std::fs::write(dir.join("murmur.lock"), &lock).expect("write lock");
        let err = daemon.client.start(&request(&dir)).await.expect_err(needle);
        assert_eq!(code(&err), code_expected, "{err}");
        assert!(err.to_string().contains(needle), "{err}");
        assert_eq!(
            std::fs::read_to_string(dir.join("murmur.lock")).expect("lock"),
            lock
        );
        assert_eq!(entries(&dir), capsule_files);
    }
    assert_eq!(
        daemon.client.list(true).await.expect("list").len(),
        sessions_before
    );
}

#[tokio::test]
async fn tampered_bytes_are_refused_before_anything_is_written() {
    let daemon = Daemon::start().await;
    let registry = publish_echo(&daemon).await;
    let bundle = registry.join("echo-tool/1.0.0/echo-tool-1.0.0.zip");
    let mut bytes = std::fs::read(&bundle).expect("bundle");
    let last = bytes.len() - 30;
    bytes[last] ^= 0xff;
    std::fs::write(&bundle, bytes).expect("tamper");
    let dir = invoker_capsule(daemon.root.path(), "tampered");
    let err = daemon
        .client
        .start(&request(&dir))
        .await
        .expect_err("tampered");
    assert_eq!(code(&err), "integrity_failed", "{err}");
    assert!(err.to_string().contains("integrity check failed"), "{err}");
    assert!(
        !dir.join("murmur.lock").exists(),
        "no lock for a failed stage"
    );
    assert!(daemon.client.list(true).await.expect("list").is_empty());
    assert!(entries(&daemon.state_dir.join("sessions")).is_empty());
}

/// Publishes raw `bundle` bytes as `name@1.0.0` (bypassing the checks of
/// `roostctl publish`), starts a capsule that declares it, and returns the
/// refusal, after checking that nothing was recorded.
async fn refused_bundle(daemon: &Daemon, manifest_text: &str, bundle: &[u8]) -> String {
    use roost_ctl::artifact::{ArtifactManifest, GENERIC_PLATFORM, LocalRegistry};
    let registry = LocalRegistry::new(daemon.state_dir.join("registry"));
    let manifest = ArtifactManifest::parse(manifest_text).expect("manifest");
    registry
        .publish(&manifest, bundle, GENERIC_PLATFORM)
        .expect("publish raw");
    let dir = capsule(
        daemon.root.path(),
        &manifest.name,
        "invoker",
        &format!(
            "artifacts: [{{name: {}, version: 1.0.0, runtime: {}}}]\n",
            manifest.name, manifest.runtime
        ),
    );
    let err = daemon
        .client
        .start(&request(&dir))
        .await
        .expect_err("bad bundle");
    assert_eq!(code(&err), "invalid_bundle", "{err}");
    assert!(daemon.client.list(true).await.expect("list").is_empty());
    err.to_string()
}

#[tokio::test]
async fn escaping_and_symlink_bundles_are_refused() {
    let daemon = Daemon::start().await;
    let manifest = "name: evil\nversion: 1.0.0\nruntime: tool\n";
    let slip = roost_ctl::artifact::bundle::write_zip(&[
        ("murmur.yaml", manifest.as_bytes(), 0o644),
        ("component.wasm", b"\0asm", 0o644),
        ("../../escaped.txt", b"gotcha", 0o644),
    ])
    .expect("zip");
    let err = refused_bundle(&daemon, manifest, &slip).await;
    assert!(
        err.contains("`../../escaped.txt` escapes the bundle"),
        "{err}"
    );
    assert!(!daemon.root.path().join("escaped.txt").exists());

    // A payload that is a symlink (to a host file) is refused the same way.
    let manifest = "name: linked\nversion: 1.0.0\nruntime: skill\n";
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default();
    zip.start_file("murmur.yaml", options).expect("start");
    std::io::Write::write_all(&mut zip, manifest.as_bytes()).expect("write");
    zip.add_symlink("skill.md", "/etc/passwd", options)
        .expect("symlink");
    let linked = zip.finish().expect("finish").into_inner();
    let err = refused_bundle(&daemon, manifest, &linked).await;
    assert!(err.contains("`skill.md` is a symlink"), "{err}");
}

/// Processes whose command line is exactly `words`.
fn processes(words: &str) -> usize {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|c| String::from_utf8_lossy(c).replace('\0', " ").trim() == words)
        .count()
}

/// An invoker capsule whose `echo-tool` is a native tool that never answers
/// and leaves a child behind (`sleep <secs>` in the background, then
/// `sleep <secs + 1>`); each test picks its own `secs` so counts do not mix.
async fn hung_tool_capsule(daemon: &Daemon, name: &str, timeout_secs: u64, secs: u32) -> PathBuf {
    let script = format!("#!/bin/sh\nsleep {secs} &\nsleep {}\n", secs + 1);
    publish_one(
        daemon,
        "name: echo-tool\nversion: 1.0.0\nruntime: tool\nimplementation: native\n",
        "echo-tool",
        script.as_bytes(),
    )
    .await;
    capsule(
        daemon.root.path(),
        name,
        "invoker",
        &format!(
            "artifacts: [{{name: echo-tool, version: 1.0.0, runtime: tool}}]\ntools: [echo-tool]\n\
             capabilities: {{limits: {{timeout_secs: {timeout_secs}}}}}\n"
        ),
    )
}

/// Waits (up to 2 s) until `count()` is `want`; returns the last count.
async fn settle(want: usize, count: impl Fn() -> usize) -> usize {
    let mut seen = count();
    for _ in 0..100 {
        if seen == want {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        seen = count();
    }
    seen
}

fn hung_processes(secs: u32) -> usize {
    processes(&format!("sleep {secs}")) + processes(&format!("sleep {}", secs + 1))
}

#[tokio::test]
async fn a_native_tool_past_its_deadline_is_killed_with_its_children() {
    let daemon = Daemon::start().await;
    let dir = hung_tool_capsule(&daemon, "hung", 2, 313).await;
    let session = daemon.run_to_end(&dir).await;
    assert_eq!(session.state, SessionState::Failed, "{session:?}");
    let error = session.error.expect("reason");
    assert!(error.contains("deadline exceeded"), "{error}");
    assert_eq!(
        settle(0, || hung_processes(313)).await,
        0,
        "the tool's process group must be killed"
    );
}

#[tokio::test]
async fn stopping_a_session_kills_its_native_tool_and_children() {
    let daemon = Daemon::start().await;
    let dir = hung_tool_capsule(&daemon, "stopped", 600, 331).await;
    let session = daemon.start_capsule(&dir).await;
    assert_eq!(
        settle(2, || hung_processes(331)).await,
        2,
        "the tool and its child run"
    );
    let stopped = daemon.client.stop(&session.id).await.expect("stop");
    assert_eq!(stopped.state, SessionState::Stopped);
    assert_eq!(
        settle(0, || hung_processes(331)).await,
        0,
        "stop must kill the tool's group"
    );
}

#[tokio::test]
async fn a_failing_on_stage_hook_fails_staging() {
    let daemon = Daemon::start().await;
    publish_one(
        &daemon,
        "name: stage-hook\nversion: 1.0.0\nruntime: hook\nhook: {binding: on-stage}\n",
        "component.wasm",
        &wasm("stage_hook"),
    )
    .await;
    let dir = capsule(
        daemon.root.path(),
        "reject-me",
        "hello",
        "artifacts: [{name: stage-hook, version: 1.0.0, runtime: hook}]\n",
    );
    let session = daemon.run_to_end(&dir).await;
    assert_eq!(session.state, SessionState::Failed);
    let error = session.error.expect("reason");
    assert!(
        error.contains("staging failed: on-stage hook 'stage-hook' failed")
            && error.contains("capsules named reject-* may not be staged here"),
        "{error}"
    );
    assert!(
        !Path::new(&session.workdir).join("hello.txt").exists(),
        "the capsule never ran"
    );
    assert!(
        !dir.join("murmur.lock").exists(),
        "a failed stage writes no lock"
    );
}

#[tokio::test]
async fn a_hundred_sessions_share_one_tool_compile() {
    let daemon = Daemon::start().await;
    publish_echo(&daemon).await;
    let dir = invoker_capsule(daemon.root.path(), "shared");
    let first = daemon.run_to_end(&dir).await;
    assert_eq!(first.state, SessionState::Completed, "{first:?}");
    let compiled = daemon.metric("roost_components_compiled_total").await;
    assert_eq!(compiled, 2, "the capsule and its tool, once each");
    let mut ids = Vec::new();
    for _ in 0..100 {
        ids.push(daemon.start_capsule(&dir).await.id);
    }
    for id in ids {
        let s = daemon.client.wait(&id).await.expect("wait");
        assert_eq!(s.state, SessionState::Completed, "{s:?}");
    }
    assert_eq!(daemon.metric("roost_components_compiled_total").await, 2);
}

#[tokio::test]
async fn artifacts_resolve_from_an_http_registry() {
    // Publish into a directory, then serve that directory over loopback HTTP.
    let served = tempfile::tempdir().expect("tempdir");
    let echo = artifact_dir(served.path(), ECHO, "component.wasm", &wasm("echo_tool"));
    let root = served.path().join("registry");
    publish(&root, &echo).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let files = root.clone();
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let files = files.clone();
        async move {
            let path = files.join(uri.path().trim_start_matches('/'));
            match std::fs::read(path) {
                Ok(bytes) => (axum::http::StatusCode::OK, bytes),
                Err(_) => (axum::http::StatusCode::NOT_FOUND, Vec::new()),
            }
        }
    });
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let config = format!("{TEST_CONFIG}registry: http://{addr}/\n");
    let daemon = Daemon::start_with(&config, &[]).await;
    let dir = invoker_capsule(daemon.root.path(), "remote");
    let session = daemon.run_to_end(&dir).await;
    assert_eq!(
        session.state,
        SessionState::Completed,
        "{session:?}\n{}",
        daemon.log()
    );
    assert!(dir.join("murmur.lock").is_file());
    server.abort();
}

#[tokio::test]
async fn bash_with_network_access_is_flagged_w_sec_003() {
    let daemon = Daemon::start().await;
    let bootstrap = |session: &roost_ctl::api::Session| {
        std::fs::read_to_string(
            Path::new(&session.bookkeeping_dir)
                .join("logs")
                .join("bootstrap.log"),
        )
        .unwrap_or_default()
    };
    let flagged = capsule(
        daemon.root.path(),
        "bash-net",
        "hello",
        "capabilities: {shell: {allow: [bash]}, network: {allow: [\"http://127.0.0.1:*\"]}}\n",
    );
    let session = daemon.run_to_end(&flagged).await;
    assert_eq!(session.state, SessionState::Completed, "{session:?}");
    let log = bootstrap(&session);
    assert!(
        log.contains("warning[W-SEC-003]") && log.contains("network.allow does not constrain"),
        "{log}"
    );
    assert!(daemon.log().contains("W-SEC-003"));
    // `sh` is not `bash`: the warning is scoped to bash, as upstream.
    let quiet = capsule(
        daemon.root.path(),
        "sh-net",
        "hello",
        "capabilities: {shell: {allow: [sh]}, network: {allow: [\"http://127.0.0.1:*\"]}}\n",
    );
    let session = daemon.run_to_end(&quiet).await;
    assert!(!bootstrap(&session).contains("W-SEC-003"));
}

/// `POST /v1/sessions?progress=true` (what `roostctl start` shows on a
/// terminal): each staging step as it starts, in order, then the session;
/// a refusal ends the stream as the plain request would have answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_reports_its_staging_steps_as_they_happen() {
    let daemon = Daemon::start().await;
    publish_echo(&daemon).await;
    let dir = invoker_capsule(daemon.root.path(), "progress");
    let mut steps = Vec::new();
    let session = daemon
        .client
        .start_with_progress(&request(&dir), |step, what| {
            steps.push(format!("{step} {what}"));
        })
        .await
        .expect("start");
    assert_eq!(session.name, "progress");
    assert_eq!(
        steps,
        [
            format!("read {}", dir.display()),
            format!("compile {}", dir.join("invoker.wasm").display()),
            "fetch echo-tool@1.0.0".into(),
            "verify echo-tool@1.0.0".into(),
            "compile echo-tool@1.0.0".into(),
        ]
    );
    let missing = daemon.root.path().join("no-such-capsule");
    let err = daemon
        .client
        .start_with_progress(&request(&missing), |_, _| {})
        .await
        .expect_err("refused");
    assert_eq!(code(&err), "capsule_unreadable", "{err}");
}
