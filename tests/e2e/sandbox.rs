//! The tool jail, proven against a control: every check runs once in a roostd
//! with the jail (the default) and once in a roostd with
//! `sandbox.jail_tools: false`. CI runs as root, so a denial in the jailed run
//! that the control run does not see comes from the jail, not from file
//! permissions.

use std::path::Path;

use roost_ctl::api::{SessionState, StartRequest};
use serde_json::Value;

use crate::harness::{Daemon, TEST_CONFIG, capsule};

pub(crate) async fn jailed_and_control() -> (Daemon, Daemon) {
    let control = format!("{TEST_CONFIG}sandbox: {{jail_tools: false}}\n");
    (
        Daemon::start().await,
        Daemon::start_with(&control, &[]).await,
    )
}

/// What this host can enforce, as roostd detects it.
pub(crate) fn host_support() -> roostd::sandbox::Support {
    roostd::sandbox::Support::detect(roostd::sandbox::cgroup::PidsCgroups::detect().as_ref())
}

/// Whether this kernel has Landlock; when it does not, the jailed daemon must
/// say so instead of the tests passing.
pub(crate) fn landlock_or_reported(daemon: &Daemon) -> bool {
    let support = host_support();
    if support.landlock_abi.is_none() {
        let log = daemon.log();
        assert!(
            log.contains("tier=\"rlimits-only\"") || log.contains("tier=rlimits-only"),
            "{log}"
        );
        eprintln!("this kernel has no Landlock: checked that roostd reports it");
        return false;
    }
    true
}

/// Runs `command` through the shell tool `tool` in a fresh workdir; returns
/// the tool's result and the workdir.
pub(crate) async fn run_shell(
    daemon: &Daemon,
    tool: &str,
    command: &str,
    caps: &str,
) -> (Value, tempfile::TempDir) {
    let workdir = tempfile::tempdir().expect("workdir");
    let (_, result) = shell_in(daemon, workdir.path(), tool, command, caps).await;
    assert_eq!(result["ok"], true, "{result}");
    (result, workdir)
}

/// Runs `command` through the shell tool `tool` in `workdir` (kept as it
/// is); returns the session's id and the tool's result (`null` if the guest
/// wrote none).
pub(crate) async fn shell_in(
    daemon: &Daemon,
    workdir: &Path,
    tool: &str,
    command: &str,
    caps: &str,
) -> (String, Value) {
    std::fs::write(workdir.join("shell-tool.txt"), tool).expect("tool");
    std::fs::write(workdir.join("shell-command.txt"), command).expect("command");
    let dir = capsule(
        daemon.root.path(),
        "shellrun",
        "shellrun",
        &format!("tools: [{tool}]\ncapabilities: {{shell: {{allow: [{tool}]}}{caps}}}\n"),
    );
    let session = daemon
        .client
        .start(&StartRequest {
            path: dir.display().to_string(),
            workdir: Some(workdir.display().to_string()),
            ..StartRequest::default()
        })
        .await
        .expect("start");
    let session = daemon.client.wait(&session.id).await.expect("wait");
    let result = std::fs::read_to_string(workdir.join("shell-result.json"))
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null);
    assert_eq!(
        session.state,
        SessionState::Completed,
        "{session:?} {result}\n{}",
        daemon.log()
    );
    (session.id, result)
}

pub(crate) fn data(result: &Value) -> &str {
    result["data"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn reading_etc_shadow_is_denied_by_the_jail() {
    let (jailed, control) = jailed_and_control().await;
    if !landlock_or_reported(&jailed) {
        return;
    }
    let (result, _w) = run_shell(&jailed, "sh", "cat /etc/shadow", "").await;
    assert_eq!(result["status"], "failed", "{result}");
    assert!(
        data(&result).contains("/etc/shadow: Permission denied"),
        "{result}"
    );
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let (result, _w) = run_shell(&control, "sh", "cat /etc/shadow", "").await;
        assert_eq!(
            result["status"], "passed",
            "control (root, no jail) reads it: {result}"
        );
    } else {
        eprintln!("not root: the control run cannot read /etc/shadow either; skipped");
    }
}

#[tokio::test]
async fn writing_outside_the_workdir_is_denied_and_inside_allowed() {
    let (jailed, control) = jailed_and_control().await;
    if !landlock_or_reported(&jailed) {
        return;
    }
    let outside = tempfile::tempdir().expect("outside dir");
    let target = outside.path().join("escaped.txt");
    let command = format!("echo in > inside.txt; echo out > {}", target.display());
    let (result, workdir) = run_shell(&jailed, "sh", &command, "").await;
    assert!(
        workdir.path().join("inside.txt").is_file(),
        "writing inside is allowed: {result}"
    );
    assert!(!target.exists(), "the jail must stop the write: {result}");
    assert!(
        data(&result).contains(&format!("{}: Permission denied", target.display())),
        "{result}"
    );
    let (result, _w) = run_shell(&control, "sh", &command, "").await;
    assert!(target.is_file(), "control (no jail) writes it: {result}");
}

/// A listener on a free loopback port that counts accepted connections.
pub(crate) async fn listener() -> (u16, tokio::task::JoinHandle<usize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let task = tokio::spawn(async move {
        let mut accepted = 0;
        while let Ok(Ok(_)) =
            tokio::time::timeout(std::time::Duration::from_secs(3), listener.accept()).await
        {
            accepted += 1;
        }
        accepted
    });
    (port, task)
}

#[tokio::test]
async fn tcp_connect_is_limited_to_allowed_ports() {
    if !Path::new("/bin/bash").exists() && !Path::new("/usr/bin/bash").exists() {
        eprintln!("no bash (needed for /dev/tcp): skipped");
        return;
    }
    let (jailed, control) = jailed_and_control().await;
    if !landlock_or_reported(&jailed) {
        return;
    }
    if host_support().landlock_abi < Some(4) {
        eprintln!("Landlock ABI < 4 has no TCP rules: roostd reports it (see tier)");
        return;
    }
    let (allowed, allowed_task) = listener().await;
    let (denied, denied_task) = listener().await;
    let caps = format!(", network: {{allow: [\"http://127.0.0.1:{allowed}\"]}}");
    let command =
        format!("echo a > /dev/tcp/127.0.0.1/{allowed}; echo b > /dev/tcp/127.0.0.1/{denied}");
    let (result, _w) = run_shell(&jailed, "bash", &command, &caps).await;
    assert!(data(&result).contains("Permission denied"), "{result}");
    assert_eq!(
        allowed_task.await.expect("join"),
        1,
        "allowed port reached: {result}"
    );
    assert_eq!(
        denied_task.await.expect("join"),
        0,
        "denied port not reached: {result}"
    );

    let (denied, denied_task) = listener().await;
    let command = format!("echo b > /dev/tcp/127.0.0.1/{denied}");
    let (result, _w) = run_shell(&control, "bash", &command, &caps).await;
    assert_eq!(
        denied_task.await.expect("join"),
        1,
        "control reaches it: {result}"
    );
}

#[tokio::test]
async fn udp_sockets_are_refused_unless_dns_is_allowed() {
    if !Path::new("/bin/bash").exists() && !Path::new("/usr/bin/bash").exists() {
        eprintln!("no bash (needed for /dev/udp): skipped");
        return;
    }
    let (jailed, control) = jailed_and_control().await;
    if !host_support().seccomp {
        let log = jailed.log();
        assert!(
            log.contains("seccomp (UDP"),
            "the missing filter is reported: {log}"
        );
        eprintln!("this kernel has no seccomp: checked that roostd reports it");
        return;
    }
    let receiver = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = receiver.local_addr().expect("addr").port();
    let command = format!("echo jailed > /dev/udp/127.0.0.1/{port}");
    let (result, _w) = run_shell(&jailed, "bash", &command, "").await;
    assert!(
        data(&result).contains("Operation not permitted"),
        "{result}"
    );
    let (result, _w) = run_shell(&control, "bash", &command, "").await;
    let mut buf = [0u8; 64];
    let received = tokio::time::timeout(std::time::Duration::from_secs(2), receiver.recv(&mut buf))
        .await
        .expect("control datagram arrives")
        .expect("recv");
    assert_eq!(
        &buf[..received],
        b"jailed\n",
        "only the control run's datagram: {result}"
    );
}

#[tokio::test]
async fn start_up_reports_the_enforcement_tier() {
    let daemon = Daemon::start().await;
    let support = host_support();
    let (tier, _) = support.tier();
    let log = daemon.log();
    assert!(
        log.contains(&format!("tier=\"{tier}\"")) || log.contains(&format!("tier={tier}")),
        "{log}"
    );
    if support.landlock_abi >= Some(6) && support.seccomp {
        assert_eq!(tier, "full");
    } else {
        assert_ne!(tier, "full", "never claim what is not in force");
    }
}

#[tokio::test]
async fn doctor_reports_what_the_host_enforces_and_checks_roostd_paths() {
    let daemon = Daemon::start().await;
    let socket = daemon.socket.display().to_string();
    let state = daemon.state_dir.display().to_string();
    let unit = crate::harness::repo().join("systemd/roostd.service");
    let cli = <roost_ctl::cli::Cli as clap::Parser>::try_parse_from([
        "roostctl",
        "--socket",
        &socket,
        "doctor",
        "--state-dir",
        &state,
        "--unit",
        &unit.display().to_string(),
        "--json",
    ])
    .expect("parse");
    let mut out = Vec::new();
    let code = roost_ctl::cli::run(cli, &mut out).await.expect("doctor");
    let checks: Value = serde_json::from_slice(&out).expect("json");
    let find = |name: &str| {
        checks
            .as_array()
            .expect("array")
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no {name} check in {checks}"))
            .clone()
    };
    for name in ["state dir", "control socket", "systemd unit"] {
        assert_eq!(find(name)["verdict"], "ok", "{}", find(name));
    }
    let support = host_support();
    let landlock = find("landlock");
    match support.landlock_abi {
        Some(abi) => assert!(
            landlock["detail"]
                .as_str()
                .expect("detail")
                .starts_with(&format!("ABI {abi}"))
        ),
        None => assert_eq!(landlock["verdict"], "fail"),
    }
    let any_fail = checks
        .as_array()
        .expect("array")
        .iter()
        .any(|c| c["verdict"] == "fail");
    assert_eq!(code, i32::from(any_fail), "exit code follows the verdicts");
}

#[tokio::test]
async fn extra_filesystem_scope_paths_are_honoured() {
    let daemon = Daemon::start().await;
    if !landlock_or_reported(&daemon) {
        return;
    }
    let ro = tempfile::tempdir().expect("ro");
    let rw = tempfile::tempdir().expect("rw");
    std::fs::write(ro.path().join("data.txt"), "shared data\n").expect("write");
    let caps = format!(
        ", filesystem: {{read_only: [\"{}\"], read_write: [\"{}\"]}}",
        ro.path().display(),
        rw.path().display()
    );
    let command = format!(
        "cat {ro}/data.txt; echo x > {ro}/new.txt; echo y > {rw}/out.txt",
        ro = ro.path().display(),
        rw = rw.path().display()
    );
    let (result, _w) = run_shell(&daemon, "sh", &command, &caps).await;
    assert!(
        data(&result).contains("shared data"),
        "read-only path is readable: {result}"
    );
    assert!(
        data(&result).contains(&format!(
            "{}/new.txt: Permission denied",
            ro.path().display()
        )),
        "{result}"
    );
    assert!(!ro.path().join("new.txt").exists());
    assert!(
        rw.path().join("out.txt").is_file(),
        "read-write path is writable: {result}"
    );
}

#[tokio::test]
async fn the_control_socket_refuses_other_users_even_if_its_mode_is_opened() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !Path::new("/usr/bin/python3").exists() {
        eprintln!("needs root (to act as another user) and python3: skipped");
        return;
    }
    let daemon = Daemon::start().await;
    // Open every door on the way (as a misconfigured host might), so only
    // roostd's own peer check stands between uid 65534 and the API.
    let open = |p: &Path, mode| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
    open(daemon.root.path(), 0o755).expect("chmod root");
    open(daemon.socket.parent().expect("run dir"), 0o755).expect("chmod run");
    open(&daemon.socket, 0o666).expect("chmod socket");
    let script = format!(
        "import socket\ns=socket.socket(socket.AF_UNIX)\ns.connect({:?})\n\
         s.sendall(b'GET /v1/health HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n')\n\
         print(s.makefile('rb').read().decode())",
        daemon.socket.display().to_string()
    );
    let output = std::process::Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(&script)
        .uid(65534)
        .gid(65534)
        .output()
        .expect("run python3");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.starts_with("HTTP/1.1 403"),
        "{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(text.contains("uid 65534 may not use this socket"), "{text}");
    // Root (this test) is still served.
    daemon.client.health().await.expect("root is admitted");
}

#[tokio::test]
async fn status_records_what_the_jail_enforces_per_session() {
    let (jailed, control) = jailed_and_control().await;
    let (tier, missing) = host_support().tier();
    let shell = capsule(
        jailed.root.path(),
        "with-shell",
        "hello",
        "capabilities: {shell: {allow: [sh]}}\n",
    );
    let wasm_only = capsule(jailed.root.path(), "wasm-only", "hello", "");
    let expected = if missing.is_empty() {
        tier.to_string()
    } else {
        format!("{tier}: missing {}", missing.join("; "))
    };
    match jailed.client.start(&crate::harness::request(&shell)).await {
        Ok(session) => assert_eq!(session.sandbox, expected),
        Err(err) => {
            // A host that cannot enforce everything refuses by default.
            assert!(!missing.is_empty(), "{err}");
            assert_eq!(crate::harness::code(&err), "unenforceable_policy");
        }
    }
    let session = jailed.run_to_end(&wasm_only).await;
    assert_eq!(session.sandbox, "no native tools (WASM only)");
    let session = control.run_to_end(&shell).await;
    assert_eq!(session.sandbox, "unjailed (sandbox.jail_tools: false)");
    let status = control.client.get(&session.id).await.expect("status");
    assert_eq!(status.sandbox, session.sandbox, "stored with the session");
}

#[tokio::test]
async fn policy_shows_the_effective_policy_before_running() {
    let daemon = Daemon::start().await;
    let dir = capsule(
        daemon.root.path(),
        "policy",
        "hello",
        "tools: [git]\ncapabilities:\n  network: {allow: [\"https://api.example.com\", \"http://127.0.0.1:8080\"]}\n  \
         shell: {allow: [git], strip_env: [\"MYCO_*\"]}\n  filesystem: {read_only: [/usr/share]}\n  \
         limits: {timeout_secs: 7, processes: 32}\n",
    );
    let report = daemon
        .client
        .policy(&roost_ctl::api::PolicyRequest {
            path: dir.display().to_string(),
        })
        .await
        .expect("policy");
    assert_eq!(report.capsule, "policy");
    assert_eq!(report.tools, ["git"]);
    assert_eq!(report.tool_tcp_ports, Some(vec![443, 8080]));
    assert!(!report.tool_udp, "no DNS port allowed");
    assert_eq!(report.read_only, ["/usr/share"]);
    // What roostd reads of the capsule directory: its manifest and component.
    assert_eq!(
        report.capsule_files,
        [
            dir.join("murmur.yaml").display().to_string(),
            dir.join("hello.wasm").display().to_string()
        ]
    );
    assert_eq!(report.limits.timeout_secs, 7);
    assert_eq!(report.limits.tool_cpu_secs, 8);
    assert_eq!(report.limits.tool_processes, 32);
    assert_eq!(report.limits.memory_mb, 128, "the daemon's default");
    let (tier, missing) = host_support().tier();
    assert!(
        report.native_tools.starts_with(tier),
        "{}",
        report.native_tools
    );
    assert_eq!(report.refused.is_some(), !missing.is_empty());
    assert!(
        daemon.client.list(true).await.expect("list").is_empty(),
        "nothing ran"
    );

    let err = daemon
        .client
        .policy(&roost_ctl::api::PolicyRequest {
            path: "/nonexistent/capsule".into(),
        })
        .await
        .expect_err("no capsule");
    assert_eq!(crate::harness::code(&err), "invalid_manifest", "{err}");

    // A grant roostd would refuse says so before anything runs; the control:
    // the same capsule with an ordinary grant is not refused for it.
    let state = daemon.state_dir.display().to_string();
    for (grant, refused) in [(state.as_str(), true), ("/usr/share", false)] {
        let dir = capsule(
            daemon.root.path(),
            "policy-grant",
            "hello",
            &format!("capabilities: {{filesystem: {{read_only: [\"{grant}\"]}}}}\n"),
        );
        let report = daemon
            .client
            .policy(&roost_ctl::api::PolicyRequest {
                path: dir.display().to_string(),
            })
            .await
            .expect("policy");
        let says = report.refused.unwrap_or_default();
        assert_eq!(says.contains("state dir"), refused, "{grant}: {says}");
    }
}

#[tokio::test]
async fn tools_run_under_the_capsules_rlimits() {
    let (jailed, control) = jailed_and_control().await;
    let caps = ", limits: {timeout_secs: 9, processes: 40, open_files: 64, output_bytes: 1048576}";
    let (result, _w) = run_shell(&jailed, "sh", "ulimit -a", caps).await;
    let text = data(&result);
    for (line, value) in [
        ("time(seconds)", "10"),
        ("process", "40"),
        ("nofiles", "64"),
        ("file(blocks)", "2048"),
    ] {
        let found = text
            .lines()
            .find(|l| l.starts_with(line))
            .unwrap_or_else(|| panic!("no {line} in {text}"));
        assert!(found.trim_end().ends_with(value), "{found} (want {value})");
    }
    // Root is exempt from RLIMIT_NPROC, so under root the process limit bounds
    // nothing: a known gap on hosts without cgroup limits (see docs/sandbox.md).
    let (result, _w) = run_shell(&control, "sh", "ulimit -a", caps).await;
    assert!(
        !data(&result).contains("nofiles              64"),
        "control is not limited: {result}"
    );
}

/// Sends a bare HTTP/1.1 GET over TCP and returns the whole response.
async fn http_get(addr: &str, path: &str, token: Option<&str>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read");
    response
}

#[tokio::test]
async fn the_tcp_control_api_requires_the_bearer_token() {
    use std::os::unix::fs::PermissionsExt;
    let secrets = tempfile::tempdir().expect("tempdir");
    let token_file = secrets.path().join("control.token");
    let token = "s3cret-token-for-roost-e2e";
    std::fs::write(&token_file, format!("{token}\n")).expect("token");
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let config = format!(
        "{TEST_CONFIG}control: {{tcp_listen: \"127.0.0.1:0\", token_file: \"{}\"}}\n",
        token_file.display()
    );
    let daemon = Daemon::start_with(&config, &[]).await;
    let addr = daemon
        .client
        .health()
        .await
        .expect("health")
        .control_addr
        .expect("TCP control address");
    let refused = http_get(&addr, "/v1/sessions", None).await;
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    assert!(
        refused
            .to_ascii_lowercase()
            .contains("www-authenticate: bearer"),
        "{refused}"
    );
    let wrong = http_get(&addr, "/v1/sessions", Some("not-the-token-at-all")).await;
    assert!(wrong.starts_with("HTTP/1.1 401"), "{wrong}");
    let served = http_get(&addr, "/v1/sessions", Some(token)).await;
    assert!(served.starts_with("HTTP/1.1 200"), "{served}");
    assert!(
        !daemon.log().contains(token),
        "the token never reaches the log"
    );
}

#[tokio::test]
async fn a_fork_bomb_is_bounded_by_the_process_limit() {
    let (jailed, control) = jailed_and_control().await;
    // A bounded bomb: 40 forks as fast as the shell can; each success is
    // counted in a file by a builtin (dash aborts at the first failed fork).
    let script = "for i in $(seq 40); do (exec sleep 3) & echo $i > forked; done";
    let caps = ", limits: {timeout_secs: 20, processes: 12}";
    let support = host_support();
    let count = |w: &tempfile::TempDir| -> u32 {
        std::fs::read_to_string(w.path().join("forked"))
            .unwrap_or_default()
            .trim()
            .parse()
            .unwrap_or(0)
    };
    let (result, w) = run_shell(&jailed, "sh", script, caps).await;
    if support.root && !support.pids_cgroup {
        // Root ignores RLIMIT_NPROC; without a pids cgroup nothing bounds it,
        // and the session record must say so.
        let log = jailed.log();
        assert!(
            log.contains("missing=") && log.contains("process limit"),
            "{log}"
        );
        eprintln!("no writable pids cgroup as root: checked that the tier reports it");
        return;
    }
    let forked = count(&w);
    assert!(
        (1..12).contains(&forked),
        "the jail let {forked} of 40 forks through with processes: 12: {result}"
    );
    assert!(
        data(&result).contains("fork"),
        "the shell says why: {result}"
    );
    let (result, w) = run_shell(&control, "sh", script, caps).await;
    if support.root {
        assert_eq!(
            count(&w),
            40,
            "control (root, no jail) forks freely: {result}"
        );
    } else {
        eprintln!("not root: RLIMIT_NPROC bounds the control too; control skipped");
    }
}
