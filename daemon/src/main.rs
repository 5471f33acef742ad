//! roostd binary: flags and environment, logging, signals; everything else is in the library.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use roostd::config::{DaemonConfig, Overrides};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Parser)]
#[command(
    name = "roostd",
    version,
    about = "Supervisor daemon for murmur capsules"
)]
struct Args {
    /// YAML config file (default: /etc/roost/roost.yaml as root, else XDG config).
    #[arg(long, env = "ROOST_CONFIG")]
    config: Option<PathBuf>,
    /// State directory: database, compiled components, session workdirs.
    #[arg(long, env = "ROOST_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Control API Unix socket.
    #[arg(long)]
    socket: Option<PathBuf>,
    /// A2A gateway address, e.g. 127.0.0.1:7420 (port 0 picks a free port).
    #[arg(long)]
    a2a_listen: Option<SocketAddr>,
    /// Seconds a session that ends after its tasks waits for the next one.
    #[arg(long, env = "MURMUR_A2A_TIMEOUT_SECS")]
    a2a_idle_timeout_secs: Option<u64>,
    /// Artifact registry: a directory or an http:// URL (default: <state-dir>/registry).
    #[arg(long, env = "ROOST_REGISTRY")]
    registry: Option<String>,
    /// Serve /metrics, /healthz and /readyz on this address (metrics.listen).
    #[arg(long, env = "ROOST_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// Serve the web dashboard on this address (ui.listen; needs a token file).
    #[arg(long, env = "ROOST_UI_LISTEN")]
    ui_listen: Option<SocketAddr>,
    /// The dashboard's login token (ui.token_file): mode 0600.
    #[arg(long, env = "ROOST_UI_TOKEN_FILE")]
    ui_token_file: Option<PathBuf>,
    /// Join a cluster over NATS JetStream: its servers, nats://HOST:PORT[,nats://…]
    /// (cluster.servers).
    #[arg(long, env = "ROOST_CLUSTER", value_delimiter = ',')]
    cluster: Option<Vec<String>>,
    /// This node's name in the cluster (cluster.node; default: the host name).
    #[arg(long, env = "ROOST_NODE")]
    node: Option<String>,
    /// Check the configuration (file, environment, flags; token and CA
    /// files), print the effective one as YAML, and exit: 0 if roostd
    /// would start with it, 2 if not.
    #[arg(long)]
    check_config: bool,
    /// Print roostd's man page (roff) and exit.
    #[arg(long, hide = true)]
    man: bool,
}

/// `--check-config`: the effective config on stdout, problems on stderr.
fn check_config(overrides: Overrides) -> i32 {
    let config = match DaemonConfig::load(overrides) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("roostd: {error}");
            return 2;
        }
    };
    let warnings = match roostd::daemon::check(&config) {
        Ok(warnings) => warnings,
        Err(error) => {
            eprintln!("roostd: {error}");
            return 2;
        }
    };
    // What roostd would use, with the defaults that depend on others spelled out.
    let mut shown = config.clone();
    shown.registry = Some(config.registry_location());
    match serde_yaml::to_string(&shown) {
        Ok(yaml) => {
            print!("# effective configuration (flags > environment > file > defaults)\n{yaml}")
        }
        Err(error) => {
            eprintln!("roostd: cannot print the configuration: {error}");
            return 1;
        }
    }
    for warning in warnings {
        eprintln!("roostd: warning: {warning}");
    }
    eprintln!("roostd: configuration OK");
    0
}

/// glibc raises its mmap threshold after each large free, after which large
/// transient buffers (artifact bundles, request bodies) come from the heap and
/// their pages stay with the process. A fixed threshold sends every buffer of
/// 128 KiB or more back to the kernel when it is freed, so a long-running
/// roostd's memory follows its live sessions rather than its busiest moment.
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

/// roostd's log filter: `RUST_LOG` when set (it wins, and a reload leaves
/// it), else `log.level` from the config, which a reload changes.
struct LogLevel {
    handle: tracing_subscriber::reload::Handle<
        tracing_subscriber::EnvFilter,
        tracing_subscriber::Registry,
    >,
    from_env: bool,
    current: std::sync::Mutex<String>,
}

impl LogLevel {
    fn apply(&self, level: &str) {
        let mut current = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *current == level {
            return;
        }
        if self.from_env {
            tracing::warn!(level, "log.level not applied: RUST_LOG is set and wins");
            return;
        }
        match tracing_subscriber::EnvFilter::try_new(level)
            .map_err(|e| e.to_string())
            .and_then(|f| self.handle.reload(f).map_err(|e| e.to_string()))
        {
            Ok(()) => {
                tracing::info!(from = %current, to = level, "log level changed");
                *current = level.to_string();
            }
            Err(error) => tracing::error!(%error, "log level not changed"),
        }
    }
}

/// Logging as `log.format` says: text on stderr (colours only on a
/// terminal), JSON lines on stderr, or journald's own protocol (text on
/// stderr, with a warning, where there is no journald); filtered by
/// `RUST_LOG`, else `log.level`.
fn init_logging(settings: &roostd::config::LogSettings) -> LogLevel {
    use roostd::config::LogFormat;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let level = settings.level.as_str();
    let from_env = std::env::var("RUST_LOG").is_ok_and(|v| !v.is_empty());
    // An empty RUST_LOG is no filter of its own (the EnvFilter would read it
    // as "errors only"): log.level then.
    let filter = from_env
        .then(|| tracing_subscriber::EnvFilter::try_from_default_env().ok())
        .flatten()
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new(level));
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    let base = tracing_subscriber::registry().with(filter);
    let text = || {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
    };
    let mut no_journald = None;
    match settings.format {
        LogFormat::Text => base.with(text()).init(),
        LogFormat::Json => base.with(roostd::logfmt::json_layer()).init(),
        LogFormat::Journald => match tracing_journald::layer() {
            Ok(journald) => base
                // Fields as they are named (SESSION_ID, not F_SESSION_ID):
                // none of roostd's collide with journald's own.
                .with(
                    journald
                        .with_syslog_identifier("roostd".into())
                        .with_field_prefix(None),
                )
                .init(),
            Err(error) => {
                base.with(text()).init();
                no_journald = Some(error);
            }
        },
    }
    if let Some(error) = no_journald {
        tracing::warn!(%error, "log.format is journald, but journald is not reachable here: logging text to stderr");
    }
    LogLevel {
        handle,
        from_env,
        current: std::sync::Mutex::new(level.to_string()),
    }
}

fn main() -> anyhow::Result<()> {
    // The jail helper must not start logging or a runtime: it execs a tool.
    let raw: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if raw.get(1).is_some_and(|a| a == roostd::sandbox::JAIL_ARG) {
        std::process::exit(roostd::sandbox::helper_main(raw));
    }
    let args = Args::parse();
    if args.man {
        let mut out = std::io::stdout().lock();
        clap_mangen::Man::new(<Args as clap::CommandFactory>::command())
            .section("8")
            .render(&mut out)
            .context("cannot write the man page")?;
        return Ok(());
    }
    let overrides = Overrides {
        config: args.config,
        state_dir: args.state_dir,
        socket: args.socket,
        a2a_listen: args.a2a_listen,
        registry: args.registry,
        a2a_idle_timeout_secs: args.a2a_idle_timeout_secs,
        metrics_listen: args.metrics_listen,
        ui_listen: args.ui_listen,
        ui_token_file: args.ui_token_file,
        cluster: args.cluster,
        node: args.node,
    };
    if args.check_config {
        std::process::exit(check_config(overrides));
    }
    tune_allocator();
    let config = DaemonConfig::load(overrides.clone()).context("roostd cannot start")?;
    let log_level = init_logging(&config.log);
    for deprecation in &config.deprecations {
        tracing::warn!("{deprecation}");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("roost-worker")
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let shutdown = CancellationToken::new();
        let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
        let mut int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
        let mut hup = signal(SignalKind::hangup()).context("cannot handle SIGHUP")?;
        let trigger = shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => tracing::info!(signal = "SIGTERM", "received"),
                _ = int.recv() => tracing::info!(signal = "SIGINT", "received"),
            }
            trigger.cancel();
        });
        let (reloads, reloaded) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                tracing::info!(signal = "SIGHUP", "reading the configuration again");
                match DaemonConfig::load(overrides.clone()) {
                    Ok(config) => {
                        log_level.apply(&config.log.level);
                        if reloads.send(config).await.is_err() {
                            return;
                        }
                    }
                    Err(error) => tracing::error!(
                        %error,
                        "configuration not reloaded: roostd keeps running as it was"
                    ),
                }
            }
        });
        roostd::daemon::run(config, shutdown, reloaded)
            .await
            .context("roostd failed")
    })?;
    // Sessions that outlived the grace period must not keep the process alive.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    Ok(())
}
