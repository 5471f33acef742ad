//! Test harness: builds the guest components once, writes capsule dirs, and runs a
//! real roostd on a temp socket and state dir (killed in `Drop`).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use roost_ctl::api::{Session, StartRequest};
use roost_ctl::{Client, ClientError};

/// Root of the repository.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("daemon/ has a parent")
        .to_path_buf()
}

/// Builds the wasm32-wasip2 workspace or crate at `manifest` (release) into
/// the guests' target dir; returns the dir its components land in.
fn build_wasm(manifest: &Path, what: &str) -> PathBuf {
    let target = repo().join("tests").join("guests").join("target");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--manifest-path",
        ])
        .arg(manifest)
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .status()
        .unwrap_or_else(|e| panic!("run cargo to build {what}: {e}"));
    assert!(status.success(), "building {what} failed");
    target.join("wasm32-wasip2").join("release")
}

/// The compiled guest `name` (built once per test process).
pub fn guest(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        build_wasm(
            &repo().join("tests").join("guests").join("Cargo.toml"),
            "the guest components",
        )
    });
    let path = dir.join(format!("{name}.wasm"));
    assert!(path.is_file(), "guest {} missing", path.display());
    path
}

/// The example OpenAI-compatible driver (`examples/artifacts/openai-driver`):
/// its manifest text and its component, built once per test process.
pub fn openai_driver() -> (String, Vec<u8>) {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = repo()
        .join("examples")
        .join("artifacts")
        .join("openai-driver");
    let wasm = BUILT.get_or_init(|| {
        build_wasm(&dir.join("Cargo.toml"), "the openai driver").join("openai_driver.wasm")
    });
    let manifest = std::fs::read_to_string(dir.join("murmur.yaml")).expect("driver manifest");
    (manifest, std::fs::read(wasm).expect("driver component"))
}

/// The example A2A conformance capsule (`examples/a2a-conformance`), built
/// once per test process.
pub fn conformance_wasm() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let manifest = repo()
                .join("examples")
                .join("a2a-conformance")
                .join("Cargo.toml");
            build_wasm(&manifest, "the conformance capsule").join("a2a_conformance.wasm")
        })
        .clone()
}

/// The ITK agent capsule's component (`examples/itk-agent`), built once.
pub fn itk_wasm() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let manifest = repo().join("examples").join("itk-agent").join("Cargo.toml");
            build_wasm(&manifest, "the ITK agent capsule").join("itk_agent.wasm")
        })
        .clone()
}

/// A capsule dir running the ITK agent capsule as `name`, with the
/// example's manifest.
pub fn itk_agent(root: &Path, name: &str) -> PathBuf {
    let dir = root.join(format!("capsule-{name}-{}", unique()));
    std::fs::create_dir_all(&dir).expect("capsule dir");
    let component = inside(&dir, &itk_wasm());
    let example = std::fs::read_to_string(repo().join("examples/itk-agent/murmur.yaml"))
        .expect("the example's manifest");
    let manifest = example
        .replace("name: itk\n", &format!("name: {name}\n"))
        .replace(
            "component: component.wasm",
            &format!("component: {component}"),
        );
    std::fs::write(dir.join("murmur.yaml"), manifest).expect("write manifest");
    dir
}

/// A capsule dir running the conformance capsule as `name`: the example's
/// lifecycle, then `extra` manifest lines.
pub fn conformance(root: &Path, name: &str, lifecycle: &str, extra: &str) -> PathBuf {
    let dir = root.join(format!("capsule-{name}-{}", unique()));
    std::fs::create_dir_all(&dir).expect("capsule dir");
    let component = inside(&dir, &conformance_wasm());
    let manifest = format!(
        "name: {name}\nversion: 0.1.0\ncomponent: {component}\nlifecycle: {lifecycle}\n{extra}"
    );
    std::fs::write(dir.join("murmur.yaml"), manifest).expect("write manifest");
    dir
}

/// Writes a capsule dir for guest `guest` with extra manifest lines.
pub fn capsule(root: &Path, name: &str, guest_name: &str, extra: &str) -> PathBuf {
    let dir = root.join(format!("capsule-{name}-{}", unique()));
    std::fs::create_dir_all(&dir).expect("capsule dir");
    let component = inside(&dir, &guest(guest_name));
    let manifest = format!("name: {name}\nversion: 0.1.0\ncomponent: {component}\n{extra}");
    std::fs::write(dir.join("murmur.yaml"), manifest).expect("write manifest");
    dir
}

/// Puts the component `wasm` into the capsule `dir` (a manifest names only
/// files inside its capsule: a hard link where it can be, else a copy) and
/// returns the name the manifest gives it.
pub fn inside(dir: &Path, wasm: &Path) -> String {
    let name = wasm
        .file_name()
        .expect("a component file")
        .to_string_lossy()
        .into_owned();
    let to = dir.join(&name);
    if std::fs::hard_link(wasm, &to).is_err() {
        std::fs::copy(wasm, &to).expect("copy the component into the capsule");
    }
    name
}

/// A capsule that spins until stopped (its deadline is 10 minutes away).
pub fn spinner(root: &Path) -> PathBuf {
    capsule(
        root,
        "spin",
        "spin",
        "capabilities: {limits: {timeout_secs: 600}}\n",
    )
}

/// A loopback port free at the moment (for listeners roostd opens itself).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

pub(crate) fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

pub fn request(path: &Path) -> StartRequest {
    StartRequest {
        path: path.display().to_string(),
        ..StartRequest::default()
    }
}

/// A running roostd.
pub struct Daemon {
    child: Option<Child>,
    pub root: tempfile::TempDir,
    pub socket: PathBuf,
    pub state_dir: PathBuf,
    pub client: Client,
    /// Its config file, read again by each [`Daemon::spawn`].
    pub config: PathBuf,
    env: Vec<(String, String)>,
    generation: u32,
    /// The roostd executable (the built one unless a test copies it).
    binary: PathBuf,
}

pub const TEST_CONFIG: &str = "a2a_listen: 127.0.0.1:0\npool: {max_instances: 300, max_memory_mb: 256}\nshutdown_grace_secs: 5\n";

/// [`TEST_CONFIG`] for agents, whose manifests name their mock model's key
/// as `{env: ROOST_E2E_KEY}`: roostd lets them.
pub const AGENT_CONFIG: &str = "a2a_listen: 127.0.0.1:0\npool: {max_instances: 300, max_memory_mb: 256}\nshutdown_grace_secs: 5\ninference: {key_env_allow: [ROOST_E2E_KEY]}\n";

impl Daemon {
    pub async fn start() -> Self {
        Self::start_with(TEST_CONFIG, &[]).await
    }

    pub async fn start_with(config: &str, env: &[(&str, &str)]) -> Self {
        Self::start_from(Path::new(env!("CARGO_BIN_EXE_roostd")), config, env).await
    }

    /// A roostd from another executable (a renamed copy, say).
    #[allow(dead_code)]
    pub async fn start_binary(binary: &Path, config: &str, env: &[(&str, &str)]) -> Self {
        Self::start_from(binary, config, env).await
    }

    async fn start_from(binary: &Path, config: &str, env: &[(&str, &str)]) -> Self {
        let root = tempfile::tempdir().expect("tempdir");
        let socket = root.path().join("run").join("roostd.sock");
        let state_dir = root.path().join("state");
        let config_path = root.path().join("roost.yaml");
        std::fs::write(&config_path, config).expect("write config");
        let mut daemon = Self {
            child: None,
            client: Client::new(&socket),
            socket,
            state_dir,
            config: config_path,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            root,
            generation: 0,
            binary: binary.to_path_buf(),
        };
        daemon.spawn().await;
        daemon
    }

    fn log_path(&self) -> PathBuf {
        self.root
            .path()
            .join(format!("roostd-{}.log", self.generation))
    }

    /// Starts the roostd process and waits until it answers.
    pub async fn spawn(&mut self) {
        self.generation += 1;
        let log = std::fs::File::create(self.log_path()).expect("log file");
        let mut command = Command::new(&self.binary);
        command
            .arg("--config")
            .arg(&self.config)
            .arg("--state-dir")
            .arg(&self.state_dir)
            .arg("--socket")
            .arg(&self.socket)
            .env("RUST_LOG", "info,roostd=debug")
            .env_remove("NOTIFY_SOCKET")
            // A test that wants a proxy sets one.
            .env_remove("HTTP_PROXY")
            .env_remove("http_proxy")
            .env_remove("HTTPS_PROXY")
            .env_remove("https_proxy")
            .env_remove("NO_PROXY")
            .env_remove("no_proxy")
            .env_remove("WATCHDOG_USEC")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        for (k, v) in &self.env {
            command.env(k, v);
        }
        self.child = Some(command.spawn().expect("spawn roostd"));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(health) = self.client.health().await {
                assert_eq!(health.status, "ok");
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "roostd exited with {status} during start-up:\n{}",
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "roostd did not come up:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[allow(dead_code)]
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn log(&self) -> String {
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(self.log_path()) {
            let _ = f.read_to_string(&mut text);
        }
        text
    }

    /// Sends a signal and waits for the process to exit.
    pub fn signal_and_wait(&mut self, signal: i32, within: Duration) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        // SAFETY: kill(2) with a pid we own.
        unsafe { libc::kill(child.id() as i32, signal) };
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("roostd did not exit within {within:?}:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn kill9(&mut self) {
        self.signal_and_wait(libc::SIGKILL, Duration::from_secs(10));
    }

    pub async fn start_capsule(&self, path: &Path) -> Session {
        self.client
            .start(&request(path))
            .await
            .unwrap_or_else(|e| panic!("start {}: {e}\n{}", path.display(), self.log()))
    }

    /// Starts a capsule under a restart policy.
    pub async fn start_supervised(
        &self,
        path: &Path,
        restart: roost_ctl::api::RestartPolicy,
    ) -> Session {
        let request = StartRequest {
            restart,
            ..request(path)
        };
        self.client
            .start(&request)
            .await
            .unwrap_or_else(|e| panic!("start {}: {e}\n{}", path.display(), self.log()))
    }

    /// Waits until the session's guest is executing.
    pub async fn wait_running(&self, id: &str) {
        for _ in 0..2000 {
            let session = self.client.get(id).await.expect("get");
            if session.state == roost_ctl::api::SessionState::Running {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("session {id} never ran:\n{}", self.log());
    }

    pub async fn run_to_end(&self, path: &Path) -> Session {
        let session = self.start_capsule(path).await;
        self.client.wait(&session.id).await.expect("wait")
    }

    /// Reads a metric's value from `/metrics`.
    pub async fn metric(&self, line_prefix: &str) -> u64 {
        let text = self.client.metrics().await.expect("metrics");
        text.lines()
            .find_map(|l| l.strip_prefix(line_prefix).map(str::trim))
            .unwrap_or_else(|| panic!("no metric {line_prefix} in\n{text}"))
            .parse()
            .expect("numeric metric")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The API error code of a failed call.
pub fn code(err: &ClientError) -> &str {
    err.api_code().unwrap_or("(not an API error)")
}

/// Writes an artifact dir (`murmur.yaml` + payload) for `roostctl publish`.
pub fn artifact_dir(root: &Path, manifest: &str, payload: &str, bytes: &[u8]) -> PathBuf {
    let dir = root.join(format!("artifact-{}", unique()));
    std::fs::create_dir_all(&dir).expect("artifact dir");
    std::fs::write(dir.join("murmur.yaml"), manifest).expect("write manifest");
    let path = dir.join(payload);
    std::fs::write(&path, bytes).expect("write payload");
    if manifest.contains("implementation: native") {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    dir
}

/// Runs `roostctl publish <dir> --registry <registry>` through the CLI code.
pub async fn publish(registry: &Path, dir: &Path) -> String {
    use clap::Parser;
    let cli = roost_ctl::cli::Cli::try_parse_from([
        "roostctl".as_ref(),
        "publish".as_ref(),
        dir.as_os_str(),
        "--registry".as_ref(),
        registry.as_os_str(),
    ])
    .expect("parse");
    let mut out = Vec::new();
    let code = roost_ctl::cli::run(cli, &mut out)
        .await
        .unwrap_or_else(|e| panic!("publish {}: {e}", dir.display()));
    assert_eq!(code, 0);
    String::from_utf8(out).expect("utf-8")
}
