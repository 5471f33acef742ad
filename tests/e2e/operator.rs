//! The systemd path as an operator meets it, without systemd: roostd runs
//! as its own unprivileged user (as `User=roost` does), and a different
//! non-root user whose group is roostd's drives it with the built roostctl:
//! lists, starts a capsule from a directory only the operator can read
//! (roostctl uploads it), publishes into roostd's registry over the
//! socket. The control: a user outside the group is refused at the socket.
//!
//! Needs root to run the two users (ids from a range no system uses); the
//! test says so and does nothing when it is not root.

use std::os::unix::fs::{PermissionsExt, chown};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{artifact_dir, guest};

/// roostd's user and group (the unit's `roost`), an operator in that
/// group, and someone who is not.
const DAEMON: u32 = 64_720;
const OPERATOR: u32 = 64_721;
const STRANGER: u32 = 64_722;

fn binary(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_BIN_EXE_roostd")).with_file_name(name);
    assert!(
        path.is_file(),
        "{} is missing: build it with `cargo build --workspace --bins`",
        path.display()
    );
    path
}

fn owned(path: &Path, uid: u32, gid: u32, mode: u32) {
    chown(path, Some(uid), Some(gid)).expect("chown");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// roostctl as `uid` with primary group `gid` (no supplementary groups).
fn roostctl(uid: u32, gid: u32, home: &Path, socket: &Path, args: &[&str]) -> Output {
    Command::new(binary("roostctl"))
        .arg("--socket")
        .arg(socket)
        .args(args)
        .uid(uid)
        .gid(gid)
        .env_clear()
        .env("HOME", home)
        .env("PATH", "/usr/bin:/bin")
        .current_dir("/")
        .output()
        .expect("run roostctl")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_member_drives_an_unprivileged_roostd_and_uploads_what_it_cannot_read() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: running two users takes root");
        return;
    }
    let scratch = tempfile::tempdir().expect("tempdir");
    let root = scratch.path();
    owned(root, 0, 0, 0o755);
    // roostd's own: its state dir and its socket's directory (0750, as
    // RuntimeDirectory= makes it).
    let state = root.join("state");
    let run = root.join("run");
    std::fs::create_dir_all(&state).expect("state");
    std::fs::create_dir_all(&run).expect("run");
    owned(&state, DAEMON, DAEMON, 0o700);
    owned(&run, DAEMON, DAEMON, 0o750);
    let config = root.join("roost.yaml");
    std::fs::write(&config, "a2a_listen: 127.0.0.1:0\nshutdown_grace_secs: 2\n").expect("config");
    let socket = run.join("roostd.sock");
    let log = std::fs::File::create(root.join("roostd.log")).expect("log");
    let daemon = Killed(
        Command::new(binary("roostd"))
            .arg("--config")
            .arg(&config)
            .arg("--state-dir")
            .arg(&state)
            .arg("--socket")
            .arg(&socket)
            .uid(DAEMON)
            .gid(DAEMON)
            .env_clear()
            .env("HOME", &state)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn roostd"),
    );
    let roostd_log = || std::fs::read_to_string(root.join("roostd.log")).unwrap_or_default();

    // The operator's home: theirs alone (0700), so roostd cannot read it.
    let home = root.join("home");
    std::fs::create_dir_all(&home).expect("home");
    let capsule = home.join("hello");
    std::fs::create_dir_all(&capsule).expect("capsule");
    std::fs::copy(guest("hello"), capsule.join("hello.wasm")).expect("component");
    std::fs::write(
        capsule.join("murmur.yaml"),
        "name: hello\nversion: 0.1.0\ncomponent: hello.wasm\n",
    )
    .expect("manifest");
    let tool = artifact_dir(
        &home,
        "name: echo-tool\nversion: 1.0.0\nruntime: tool\ndescription: Echo\n",
        "component.wasm",
        &std::fs::read(guest("echo_tool")).expect("echo tool"),
    );
    for entry in walk(&home) {
        let mode = if entry.is_dir() { 0o700 } else { 0o600 };
        owned(&entry, OPERATOR, OPERATOR, mode);
    }
    owned(&home, OPERATOR, OPERATOR, 0o700);

    let operator = |args: &[&str]| roostctl(OPERATOR, DAEMON, &home, &socket, args);
    let deadline = Instant::now() + Duration::from_secs(60);
    while operator(&["status"]).status.code() != Some(0) {
        assert!(
            Instant::now() < deadline,
            "roostd did not come up:\n{}",
            roostd_log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // roostd itself cannot read the capsule: the control for the upload.
    let direct = Command::new("cat")
        .arg(capsule.join("murmur.yaml"))
        .uid(DAEMON)
        .gid(DAEMON)
        .output()
        .expect("cat as roostd's user");
    assert!(
        !direct.status.success(),
        "roostd's user can read the operator's home"
    );

    let started = operator(&[
        "start",
        capsule.to_str().expect("utf-8"),
        "--wait",
        "--json",
    ]);
    assert_eq!(
        started.status.code(),
        Some(0),
        "{}\n{}\n{}",
        text(&started.stdout),
        text(&started.stderr),
        roostd_log()
    );
    assert!(
        text(&started.stderr).contains("uploaded it"),
        "{}",
        text(&started.stderr)
    );
    let session: serde_json::Value = serde_json::from_slice(&started.stdout).expect("json");
    assert_eq!(session["state"], "completed");
    let manifest = session["manifest"].as_str().expect("manifest");
    assert!(
        manifest.starts_with(state.join("uploads").to_str().expect("utf-8")),
        "{manifest}"
    );
    let logs = operator(&["logs", session["id"].as_str().expect("id")]);
    assert!(
        text(&logs.stdout).contains("hello from"),
        "{}",
        text(&logs.stdout)
    );

    // publish: into roostd's registry, which the operator cannot write.
    let published = operator(&[
        "publish",
        tool.to_str().expect("utf-8"),
        "--to-daemon",
        "-q",
    ]);
    assert_eq!(
        published.status.code(),
        Some(0),
        "{}",
        text(&published.stderr)
    );
    assert!(
        state
            .join("registry/echo-tool/1.0.0/echo-tool-1.0.0.zip")
            .is_file(),
        "not in roostd's registry"
    );
    let listed = operator(&["list", "--all", "-q"]);
    assert_eq!(
        text(&listed.stdout).trim(),
        session["id"].as_str().expect("id")
    );

    // Someone outside roostd's group is refused at the socket's mode.
    let stranger = roostctl(STRANGER, STRANGER, &home, &socket, &["list"]);
    assert_eq!(
        stranger.status.code(),
        Some(5),
        "{}",
        text(&stranger.stderr)
    );
    assert!(
        text(&stranger.stderr).contains("permission denied"),
        "{}",
        text(&stranger.stderr)
    );
    drop(daemon);
}

/// Every path below `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}
