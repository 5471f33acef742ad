//! Restarts and signals: SIGTERM stops cleanly with the notify protocol, kill -9
//! leaves no ghosts, compiled components survive restarts, stale sockets.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use roost_ctl::api::{RestartPolicy, SessionState, StartRequest};

use crate::harness::{Daemon, TEST_CONFIG, capsule, request, spinner};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_guests_records_them_and_speaks_sd_notify() {
    let notify_dir = tempfile::tempdir().expect("tempdir");
    let notify_path = notify_dir.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).expect("bind notify socket");
    notify
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let notify_env = notify_path.display().to_string();
    let mut d = Daemon::start_with(
        TEST_CONFIG,
        &[
            ("NOTIFY_SOCKET", notify_env.as_str()),
            ("WATCHDOG_USEC", "100000"),
        ],
    )
    .await;
    let mut buf = [0u8; 512];
    let n = notify.recv(&mut buf).expect("READY");
    let ready = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(ready.starts_with("READY=1"), "{ready}");
    let n = notify.recv(&mut buf).expect("watchdog ping");
    assert_eq!(&buf[..n], b"WATCHDOG=1");

    let cap = spinner(d.root.path());
    let s = d.start_capsule(&cap).await;
    d.wait_running(&s.id).await;
    let status = d.signal_and_wait(libc::SIGTERM, Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "clean exit:\n{}", d.log());
    let mut saw_stopping = false;
    while let Ok(n) = notify.recv(&mut buf) {
        if buf[..n].starts_with(b"STOPPING=1") {
            saw_stopping = true;
            break;
        }
    }
    assert!(saw_stopping, "STOPPING=1 sent");
    assert!(!d.socket.exists(), "socket removed on exit");

    d.spawn().await;
    let after = d.client.get(&s.id).await.expect("get");
    assert_eq!(
        after.state,
        SessionState::Stopped,
        "recorded as stopped, not interrupted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_nine_leaves_no_ghosts_and_keeps_history() {
    let mut d = Daemon::start().await;
    let hello = capsule(d.root.path(), "hello", "hello", "");
    let spin = spinner(d.root.path());
    let done = d.run_to_end(&hello).await;
    let running = d.start_capsule(&spin).await;
    let supervised = d
        .client
        .start(&StartRequest {
            name: Some("keeper".into()),
            restart: RestartPolicy::Always,
            ..request(&spin)
        })
        .await
        .expect("start");
    d.wait_running(&running.id).await;
    d.wait_running(&supervised.id).await;
    assert_eq!(d.metric("roost_components_compiled_total").await, 2);

    d.kill9();
    d.spawn().await;
    // Sessions come back after READY (`daemon::run` resumes them): wait until
    // every one was tried before reading what came back.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while d.client.health().await.expect("health").resuming.is_some()
        || d.client.get("keeper").await.expect("get").restart_count == 0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the sessions never finished resuming"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    let all = d.client.list(true).await.expect("list");
    assert_eq!(all.len(), 3, "history kept: {all:?}");
    let done_after = d.client.get(&done.id).await.expect("get");
    assert_eq!(done_after.state, SessionState::Completed);
    let ghost = d.client.get(&running.id).await.expect("get");
    assert_eq!(
        ghost.state,
        SessionState::Interrupted,
        "no ghost: {ghost:?}"
    );
    assert!(
        ghost
            .error
            .as_deref()
            .unwrap_or("")
            .contains("roostd exited"),
        "{ghost:?}"
    );

    // The `always` session came back under the same id and name.
    let back = d.client.get("keeper").await.expect("get");
    assert_eq!(back.id, supervised.id);
    assert_eq!(back.restart_count, 1);
    assert!(!back.state.is_ended(), "{back:?}");
    let live = d.client.list(false).await.expect("list");
    assert_eq!(live.len(), 1);

    // Compiled components came from the disk cache, not cranelift.
    assert_eq!(d.metric("roost_components_compiled_total").await, 0);
    assert_eq!(
        d.metric("roost_component_cache_hits_total{tier=\"disk\"}")
            .await,
        1
    );
    d.client.stop("keeper").await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_socket_is_replaced_but_a_live_one_is_not() {
    let d = Daemon::start().await;
    // A second daemon on the same socket must refuse to start.
    let other_state = d.root.path().join("other-state");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_roostd"))
        .arg("--state-dir")
        .arg(&other_state)
        .arg("--socket")
        .arg(&d.socket)
        .arg("--a2a-listen")
        .arg("127.0.0.1:0")
        .env("ROOST_CONFIG", d.root.path().join("roost.yaml"))
        .output()
        .expect("run second roostd");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("already listening"), "{stderr}");
    assert!(d.client.health().await.is_ok(), "first daemon unharmed");

    // A socket file nobody listens on is replaced.
    let dir = tempfile::tempdir().expect("tempdir");
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).expect("bind"));
    assert!(stale.exists());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_roostd"))
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("--socket")
        .arg(&stale)
        .arg("--a2a-listen")
        .arg("127.0.0.1:0")
        .env("ROOST_CONFIG", d.root.path().join("roost.yaml"))
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let client = roost_ctl::Client::new(&stale);
    let mut up = false;
    for _ in 0..500 {
        if client.health().await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(up, "roostd replaced the stale socket");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_socket_is_group_accessible_only() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let d = Daemon::start().await;
    let meta = std::fs::metadata(&d.socket).expect("socket");
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
}
