//! SIGHUP (`systemctl reload roostd`): the config file read again and
//! applied where that is safe while sessions run. A rotated A2A token takes
//! over at once (the old one is refused, the control: it worked before),
//! the log level and registry change, what needs a restart is named, and a
//! broken file changes nothing.

use std::time::{Duration, Instant};

use roost_ctl::a2a::{Gateway, Send};

use crate::harness::{Daemon, conformance, request};

const OLD: &str = "old-token-0123456789abcdef";
const NEW: &str = "new-token-0123456789abcdef";

fn token_file(dir: &std::path::Path, token: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("a2a.token");
    std::fs::write(&path, token).expect("token");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    path
}

async fn send(addr: &str, token: &str) -> Result<(), String> {
    let gateway = Gateway {
        addr,
        route: "agent",
        token: Some(token),
    };
    let request = Send {
        text: "hello",
        task_id: None,
        stream: false,
    };
    gateway
        .send(&request, |_| {})
        .await
        .map_err(|e| e.to_string())
}

fn hup_and_wait(daemon: &Daemon, what: &str) {
    let before = daemon.log().matches(what).count();
    // SAFETY: kill has no memory preconditions.
    assert_eq!(unsafe { libc::kill(daemon.pid() as i32, libc::SIGHUP) }, 0);
    let deadline = Instant::now() + Duration::from_secs(20);
    while daemon.log().matches(what).count() == before {
        assert!(
            Instant::now() < deadline,
            "no '{what}' after SIGHUP:\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_rotates_tokens_and_names_what_needs_a_restart_and_a_broken_file_changes_nothing() {
    let secrets = tempfile::tempdir().expect("tempdir");
    let token = token_file(secrets.path(), OLD);
    let base = format!(
        "a2a_listen: 127.0.0.1:0\nshutdown_grace_secs: 5\na2a: {{token_file: {}}}\n",
        token.display()
    );
    let daemon = Daemon::start_with(&base, &[("RUST_LOG", "")]).await;
    let config = daemon.root.path().join("roost.yaml");
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let dir = conformance(
        daemon.root.path(),
        "agent",
        "{task_acceptance: queue, after_task: sleep}",
        "",
    );
    daemon.client.start(&request(&dir)).await.expect("start");
    send(&addr, OLD).await.expect("the token in force");
    assert!(send(&addr, NEW).await.is_err(), "a token not yet in force");

    // The token rotated in its file; the log level, the registry and the
    // pool changed in the config.
    token_file(secrets.path(), NEW);
    let registry = daemon.root.path().join("other-registry");
    std::fs::write(
        &config,
        format!(
            "{base}log: {{level: debug}}\nregistry: {}\npool: {{max_instances: 301}}\n",
            registry.display()
        ),
    )
    .expect("config");
    hup_and_wait(&daemon, "configuration reloaded");
    let err = send(&addr, OLD)
        .await
        .expect_err("the old token is refused now");
    assert!(err.contains("401"), "{err}");
    send(&addr, NEW).await.expect("the new token works");
    let log = daemon.log();
    assert!(log.contains("log level changed"), "{log}");
    assert!(
        log.contains(&format!("registry ({})", registry.display())),
        "{log}"
    );
    assert!(
        log.contains("take effect when roostd restarts") && log.contains("pool.max_instances"),
        "{log}"
    );

    // A broken file: nothing changes, roostd goes on.
    std::fs::write(&config, "a2a: [this is not a mapping\n").expect("config");
    hup_and_wait(&daemon, "configuration not reloaded");
    send(&addr, NEW).await.expect("still the new token");
    assert_eq!(daemon.client.health().await.expect("health").status, "ok");
}
