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

/// A dashboard login: its session cookie (`roost_session=…`) and the whole
/// `Set-Cookie` line, given `extra` request headers.
async fn ui_login(addr: &str, token: &str, extra: &str) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = format!("{{\"token\": \"{token}\"}}");
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "POST /login HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n{extra}\
         Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(req.as_bytes()).await.expect("write");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.expect("read");
    let line = raw
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .unwrap_or_else(|| panic!("no cookie: {raw}"))
        .to_string();
    let cookie = line
        .split_once(':')
        .map(|(_, v)| v.trim().split(';').next().unwrap_or_default().to_string())
        .unwrap_or_default();
    (cookie, line)
}

/// The status of `GET /` on the dashboard with `cookie`.
async fn ui_page(addr: &str, cookie: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req =
        format!("GET / HTTP/1.1\r\nHost: {addr}\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n");
    stream.write_all(req.as_bytes()).await.expect("write");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.expect("read");
    raw.lines().next().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_dashboard_token_ends_the_logins_made_with_the_old_one() {
    use std::os::unix::fs::PermissionsExt;
    let secrets = tempfile::tempdir().expect("tempdir");
    let token = secrets.path().join("ui.token");
    let write = |t: &str| {
        std::fs::write(&token, t).expect("token");
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    };
    write(OLD);
    let port = crate::harness::free_port();
    let config = format!(
        "a2a_listen: 127.0.0.1:0\nshutdown_grace_secs: 5\n\
         ui: {{listen: \"127.0.0.1:{port}\", token_file: {}}}\n",
        token.display()
    );
    let daemon = Daemon::start_with(&config, &[("RUST_LOG", "")]).await;
    let addr = format!("127.0.0.1:{port}");
    let (cookie, line) = ui_login(&addr, OLD, "").await;
    assert!(!line.contains("Secure"), "plain HTTP: no Secure ({line})");
    assert!(ui_page(&addr, &cookie).await.contains("200"), "logged in");
    // Behind a TLS proxy the cookie is Secure.
    let (_, line) = ui_login(&addr, OLD, "X-Forwarded-Proto: https\r\n").await;
    assert!(line.contains("; Secure"), "{line}");

    write(NEW);
    hup_and_wait(&daemon, "configuration reloaded");
    let after = ui_page(&addr, &cookie).await;
    assert!(
        after.contains("303") || after.contains("302"),
        "sent to /login: {after}"
    );
    // The control: a login with the new token works.
    let (cookie, _) = ui_login(&addr, NEW, "").await;
    assert!(ui_page(&addr, &cookie).await.contains("200"));
}
