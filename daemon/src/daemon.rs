//! Wiring: opens the store, builds the runtime, binds the listeners, starts the
//! supervisor, tells systemd, and shuts everything down in order.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::api::{self, ApiState, unix};
use crate::config::DaemonConfig;
use crate::metrics::Metrics;
use crate::notify::Notifier;
use crate::runtime::{Runtime, RuntimeConfig, RuntimeError};
use crate::store::{Store, StoreError};
use crate::supervisor::{Supervisor, SupervisorError};

mod heap;
mod reload;
mod tokens;
mod wire;

pub use reload::needs_restart;
pub use tokens::{Tokens, read_token};
pub use wire::{Gateway, wire};

/// Why the daemon could not start (or stop cleanly).
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("cannot create state dir {path}: {source}")]
    StateDir {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    TaskLog(#[from] crate::tasks::LogError),
    #[error("cannot join the cluster: {0}")]
    Cluster(#[from] crate::cluster::ClusterError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error(transparent)]
    Socket(#[from] unix::SocketError),
    #[error("cannot listen for A2A on {addr}: {source}")]
    A2aBind {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Control(String),
    #[error(transparent)]
    CardKey(#[from] crate::a2a::signing::SigningError),
    #[error("cannot resume sessions: {0}")]
    Resume(#[from] SupervisorError),
    #[error("tls.ca_file: {0}")]
    CaFile(#[from] crate::http_client::CaFileError),
    #[error(transparent)]
    GatewayTls(#[from] crate::api::tls::TlsError),
    #[error(transparent)]
    Telemetry(#[from] crate::telemetry::TelemetryError),
    #[error("cannot listen for {what} on {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

async fn bind(what: &'static str, addr: std::net::SocketAddr) -> Result<TcpListener, DaemonError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| DaemonError::Bind { what, addr, source })
}

/// What `roostd --check-config` checks beyond the file itself (which
/// [`DaemonConfig::load`] has parsed and validated): every token file, the
/// CA file, the control group. Binds and opens nothing. Answers the
/// warnings roostd would log at start-up.
pub fn check(config: &DaemonConfig) -> Result<Vec<String>, DaemonError> {
    if let Some(path) = &config.tls.ca_file {
        crate::http_client::trust_ca_file(path)?;
    }
    Tokens::read(config)?;
    if let Some(path) = &config.telemetry.headers_file {
        crate::telemetry::read_headers(path)?;
    }
    if let Some(tls) = &config.a2a.tls {
        crate::api::tls::ServerTls::load(tls)?;
    }
    unix::PeerPolicy::new(config.control.group.as_deref())
        .map_err(|e| DaemonError::Control(e.to_string()))?;
    let mut warnings = config.deprecations.clone();
    if !config.a2a_listen.ip().is_loopback() && config.a2a.token_file.is_none() {
        warnings.push(format!(
            "the A2A gateway would listen on {} beyond loopback without a token (set \
             a2a.token_file or listen on 127.0.0.1)",
            config.a2a_listen
        ));
    }
    Ok(warnings)
}

/// Runs roostd until `shutdown` is cancelled, then stops sessions and exits.
/// Each config from `reloads` (the binary reads the file again on SIGHUP)
/// is applied where that is safe while sessions run (`reload.rs`).
pub async fn run(
    config: DaemonConfig,
    shutdown: CancellationToken,
    reloads: tokio::sync::mpsc::Receiver<DaemonConfig>,
) -> Result<(), DaemonError> {
    let started = Instant::now();
    let notifier = Notifier::from_env();
    create_private_dir(&config.state_dir)?;
    // What roostd opens below its state dir (fresh workdirs, their files)
    // is opened without following links: the operator's links on the way
    // to the state dir are resolved once, here.
    let mut config = config;
    if let Ok(real) = std::fs::canonicalize(&config.state_dir) {
        config.state_dir = real;
    }
    if let Some(path) = &config.tls.ca_file {
        let count = crate::http_client::trust_ca_file(path)?;
        tracing::info!(ca_file = %path.display(), certificates = count, "trusting tls.ca_file for outgoing HTTPS");
    }
    // Dropped (its spans flushed) when `run` returns.
    let telemetry =
        crate::telemetry::install(&config.telemetry, tokio::runtime::Handle::current())?;
    if let Some(endpoint) = &config.telemetry.otlp_endpoint {
        tracing::info!(%endpoint, protocol = ?config.telemetry.protocol, "exporting traces over OTLP");
    }
    let store = Store::open(&config.state_dir.join("roost.db"), config.store.sync).await?;
    let interrupted = store.interrupt_live().await?;
    if interrupted > 0 {
        tracing::warn!(
            count = interrupted,
            "marked sessions interrupted by the previous exit"
        );
    }
    let metrics = Arc::new(Metrics::default());
    let runtime = Runtime::new(
        &RuntimeConfig {
            max_instances: config.pool.max_instances,
            max_memory_bytes: config.pool.max_memory_mb << 20,
            cache_dir: config.state_dir.join("cache").join("wasmtime-48"),
        },
        Arc::clone(&metrics),
    )?;
    // The gateway's certificate is read before it listens: a bad one
    // stops start-up with the reason.
    let gateway_tls = match &config.a2a.tls {
        Some(tls) => Some(Arc::new(crate::api::tls::ServerTls::load(tls)?)),
        None => None,
    };
    let a2a_scheme = if gateway_tls.is_some() {
        "https"
    } else {
        "http"
    };
    let a2a_listener = TcpListener::bind(config.a2a_listen)
        .await
        .map_err(|source| DaemonError::A2aBind {
            addr: config.a2a_listen,
            source,
        })?;
    let a2a_addr = a2a_listener
        .local_addr()
        .map_err(|source| DaemonError::A2aBind {
            addr: config.a2a_listen,
            source,
        })?;
    let metrics_listener = match config.metrics.listen {
        Some(addr) => Some(bind("metrics", addr).await?),
        None => None,
    };
    let ui_listener = match config.ui.listen {
        Some(addr) => Some(bind("the dashboard", addr).await?),
        None => None,
    };
    let peers = unix::PeerPolicy::new(config.control.group.as_deref())
        .map_err(|e| DaemonError::Control(e.to_string()))?;
    let control = unix::bind(&config.socket).await?;
    let tokens = Tokens::read(&config)?;
    let control_tcp = match (&config.control.tcp_listen, &tokens.control) {
        (Some(addr), Some(token)) => {
            let token = Arc::new(api::TokenCell::new(Arc::clone(token)));
            let listener = TcpListener::bind(addr).await.map_err(|e| {
                DaemonError::Control(format!("cannot listen for control on {addr}: {e}"))
            })?;
            let bound = listener
                .local_addr()
                .map_err(|e| DaemonError::Control(e.to_string()))?;
            Some((listener, bound, token))
        }
        _ => None,
    };
    let Tokens {
        a2a: a2a_token,
        routes: route_tokens,
        peers: peer_tokens,
        ui: ui_token,
        ..
    } = tokens;
    let ui_token = ui_token.map(|token| Arc::new(api::TokenCell::new(token)));
    let a2a_base = crate::a2a::card::PublicBase::new(
        config.a2a.public_url.as_deref(),
        a2a_addr,
        gateway_tls.is_some(),
    );
    let dedupe_message_ids = config.a2a.dedupe_message_ids;
    let card_compat = config.a2a.card_compat;
    let api_key_header = config.a2a.api_key_header.clone();
    let http = config.http.clone();
    let allow_origins = config.a2a.cors.allow_origins.clone();
    let grpc_settings = config.a2a.grpc.enabled.then(|| config.a2a.grpc.clone());
    let config_push = config.a2a.push.enabled.then(|| config.a2a.push.clone());
    let card_signer = match config.a2a.sign_cards {
        true => Some(Arc::new(crate::a2a::signing::CardSigner::open(
            &config.state_dir.join("keys"),
        )?)),
        false => None,
    };
    if !a2a_addr.ip().is_loopback() && a2a_token.is_none() {
        tracing::warn!(
            code = "W-SEC-005",
            a2a = %a2a_addr,
            "the A2A gateway listens beyond loopback without a token: anyone who can reach \
             it can send tasks to every capsule without a token of its own \
             (a2a.routes); set a2a.token_file or listen on 127.0.0.1"
        );
    }
    let socket_path = config.socket.clone();
    let grace = Duration::from_secs(config.shutdown_grace_secs);
    let running = config.clone();
    let retention = tokio::sync::watch::Sender::new(config.retention.clone());
    // A node of a cluster joins before it says READY (retrying while NATS
    // cannot be reached), or meanwhile with `cluster.required: false`.
    let cluster = match config.cluster.enabled() {
        true => Some(
            match crate::cluster::Cluster::join(
                &config.cluster,
                crate::cluster::NodeRecord {
                    node: crate::cluster::node_name(&config.cluster)?,
                    instance: uuid::Uuid::now_v7().simple().to_string(),
                    host: crate::cluster::host_name(),
                    state_dir: config.state_dir.display().to_string(),
                    gateway_url: config
                        .a2a
                        .public_url
                        .clone()
                        .unwrap_or_else(|| format!("{a2a_scheme}://{a2a_addr}")),
                    capacity: u64::from(config.pool.max_instances),
                    labels: config.cluster.labels.clone(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    live_sessions: 0,
                    heartbeat_ms: 0,
                    draining: false,
                },
                shutdown.clone(),
            )
            .await
            {
                Ok(cluster) => cluster,
                // Stopped while it waited for NATS: nothing ran yet.
                Err(error) if shutdown.is_cancelled() => {
                    tracing::info!(%error, "stopped before joining the cluster");
                    return Ok(());
                }
                Err(error) => return Err(error.into()),
            },
        ),
        false => None,
    };
    // One host: the task log is the SQLite store; a node of a cluster
    // journals each task in the cluster's stream too.
    let journal = cluster
        .as_ref()
        .map(|c| c.task_log(Arc::new(store.clone())));
    let log: Arc<dyn crate::tasks::log::TaskLog> = match &journal {
        Some(journal) => Arc::clone(journal) as Arc<dyn crate::tasks::log::TaskLog>,
        None => Arc::new(store.clone()),
    };
    // The gateway's tokens, which messages capsules send to this daemon's
    // routes are checked against too.
    let access = Arc::new(crate::a2a::access::Access::new(a2a_token, route_tokens));
    let (mut parts, outbox) = wire(
        config,
        store.clone(),
        runtime,
        metrics,
        wire::Gateway {
            a2a_base: format!("{a2a_scheme}://{a2a_addr}"),
            peer_tokens,
            access: Arc::clone(&access),
        },
        log,
    );
    // A node's artifacts come from its own registry, then the cluster's.
    let cluster_registry = cluster.as_ref().map(|c| c.registry());
    parts.registry = crate::registry::layered(parts.registry, cluster_registry.as_ref());
    // Sessions claim their routes in the cluster's route table.
    parts.claims = cluster
        .clone()
        .map(|c| c as Arc<dyn crate::a2a::routing::Claims>);
    // What the API and the gateway take at start-up besides the supervisor.
    let tasks = Arc::clone(&parts.tasks);
    let schedules = Arc::new(crate::schedules::Schedules::new(
        store.clone(),
        Arc::clone(&tasks),
        Arc::clone(&parts.routes),
        Arc::clone(&parts.schedules_changed),
    ));
    let host = Arc::new(api::HostFacts {
        config: parts.config.clone(),
        jail: parts.host_jail.jail.clone(),
        support: parts.host_jail.support.clone(),
        metrics: Arc::clone(&parts.metrics),
        tasks: Arc::clone(&tasks),
        cluster: cluster.clone(),
        schedules: Arc::clone(&schedules),
    });
    let supervisor = Supervisor::spawn(crate::supervisor::Shared::new(parts));
    if let Some(cluster) = &cluster {
        let load = supervisor.clone();
        cluster.report_load(move || load.live_sessions());
        if let Some(journal) = journal {
            cluster.move_sessions(Arc::new(supervisor.clone()), journal);
        }
        cluster.serve_starts(api::starter(supervisor.clone()));
    }
    let recovered = tasks.recover().await?;
    if recovered > 0 {
        tracing::warn!(
            tasks = recovered,
            "A2A tasks interrupted by the last stop were failed"
        );
    }
    // Hibernated sessions keep their routes: their inboxes are open again
    // before READY (nothing of them is staged; a task wakes each).
    let hibernated = supervisor.restore_hibernated().await?;
    if hibernated > 0 {
        tracing::info!(sessions = hibernated, "hibernated sessions' routes open");
    }
    // Sessions come back after READY, side by side, while the gateway and
    // the control API already answer (their tasks stay readable meanwhile);
    // queued tasks whose session does not come back fail once all have tried.
    let (resumed_tx, resumed) = tokio::sync::oneshot::channel::<()>();
    let resuming = {
        let supervisor = supervisor.clone();
        let tasks = Arc::clone(&tasks);
        tokio::spawn(async move {
            let started = Instant::now();
            match supervisor.resume_all().await {
                Ok(resumed) => tracing::info!(
                    resumed,
                    resume_ms = started.elapsed().as_millis() as u64,
                    "sessions resumed"
                ),
                Err(error) => tracing::error!(%error, "cannot resume sessions"),
            }
            let _ = resumed_tx.send(());
            match tasks.fail_orphans().await {
                Ok(0) => {}
                Ok(orphans) => tracing::warn!(
                    tasks = orphans,
                    "queued A2A tasks whose session did not come back were failed"
                ),
                Err(error) => tracing::error!(%error, "cannot fail orphaned A2A tasks"),
            }
        })
    };

    let servers = CancellationToken::new();
    {
        // Schedules fire once the sessions that were running are back (a
        // tick due meanwhile finds its route).
        let stop = servers.clone();
        tokio::spawn(async move {
            let _ = resumed.await;
            schedules.run(stop).await;
        });
    }
    tokio::spawn(
        supervisor
            .clone()
            .retention_loop(retention.subscribe(), servers.clone()),
    );
    {
        let supervisor = supervisor.clone();
        tokio::spawn(heap::give_back(
            move || supervisor.launches_ended(),
            servers.clone(),
        ));
    }
    tokio::spawn(reload::serve(
        reloads,
        reload::Handles {
            access: Arc::clone(&access),
            control_token: control_tcp.as_ref().map(|(_, _, token)| Arc::clone(token)),
            ui_token: ui_token.clone(),
            peers: outbox,
            retention,
            supervisor: supervisor.clone(),
            cluster_registry: cluster_registry.clone(),
            gateway_tls: gateway_tls.clone(),
        },
        running,
    ));
    let state = ApiState {
        supervisor: supervisor.clone(),
        started,
        a2a_addr: a2a_addr.to_string(),
        shutdown: servers.clone(),
        peers: Arc::new(peers),
        control_addr: control_tcp.as_ref().map(|(_, addr, _)| addr.to_string()),
        host: Arc::clone(&host),
    };
    // Calls on a session other nodes do not run are answered here.
    if let Some(cluster) = &cluster {
        cluster.serve_controls(api::controls(api::app(state.clone())));
    }
    let control_tcp_task = control_tcp.map(|(listener, addr, token)| {
        tracing::info!(%addr, "control API also on TCP (bearer token required)");
        tokio::spawn(api::serve_tcp(
            listener,
            state.clone(),
            token,
            (&state.host.config.http).into(),
            servers.clone(),
        ))
    });
    let ui_task = ui_listener.zip(ui_token).map(|(listener, token)| {
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(url = %format!("http://{addr}/"), "dashboard");
        }
        let ui = api::ui::UiState::new(
            supervisor.clone(),
            Arc::clone(&state.host),
            token,
            servers.clone(),
        );
        let limits = (&state.host.config.http).into();
        tokio::spawn(api::ui::serve_ui(listener, ui, limits, servers.clone()))
    });
    let control_task = tokio::spawn(api::serve_unix(control, state, servers.clone()));
    let push_policy = config_push.map(|push| Arc::new(crate::a2a::push::PushPolicy::new(&push)));
    if let Some(policy) = &push_policy {
        // The outbox outlives restarts: what was queued is delivered now.
        tokio::spawn(crate::a2a::push::deliver(
            Arc::clone(&tasks),
            Arc::clone(policy),
            servers.clone(),
        ));
    }
    let health = Arc::new(crate::health::Health::new(store.clone(), a2a_addr));
    let metrics_task = metrics_listener.map(|listener| {
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(%addr, "metrics on /metrics, /healthz, /readyz");
        }
        tokio::spawn(api::serve_metrics(
            listener,
            api::MetricsState {
                supervisor: supervisor.clone(),
                host: Arc::clone(&host),
                started,
                health: Arc::clone(&health),
            },
            (&http).into(),
            servers.clone(),
        ))
    });
    // One host: the supervisor knows where every route runs; a node of a
    // cluster asks the cluster's route table for the routes it does not run,
    // and hands their requests there.
    let routing: Arc<dyn crate::a2a::routing::Routing> = match &cluster {
        Some(cluster) => Arc::new(crate::cluster::routes::ClusterRouting {
            local: Arc::new(supervisor.clone()),
            cluster: Arc::clone(cluster),
        }),
        None => Arc::new(supervisor.clone()),
    };
    let gateway = crate::a2a::GatewayParts {
        routing,
        tasks: Arc::clone(&tasks),
        base: a2a_base,
        access,
        signer: card_signer,
        push: push_policy,
        dedupe: dedupe_message_ids,
        grpc: grpc_settings,
        card_compat,
        api_key_header,
        health: Arc::clone(&health),
        http,
        allow_origins,
        handoff: cluster
            .clone()
            .map(|c| c as Arc<dyn crate::a2a::routing::Handoff>),
    };
    let rules = crate::a2a::listen_rules(&gateway);
    // Requests other nodes hand over count against the gateway's own cap.
    let handed_most = gateway.http.max_connections;
    let gateway = crate::a2a::app(gateway);
    if let Some(cluster) = &cluster {
        cluster.serve_handoffs(crate::a2a::handoff::server(gateway.clone()), handed_most);
    }
    let a2a_task = tokio::spawn(crate::a2a::listen(
        a2a_listener,
        gateway,
        rules,
        gateway_tls,
        servers.clone(),
    ));

    tracing::info!(
        socket = %socket_path.display(),
        a2a = %a2a_addr,
        startup_ms = started.elapsed().as_millis() as u64,
        "roostd ready"
    );
    notifier.notify(&format!(
        "READY=1\nSTATUS=serving; A2A on {a2a_addr}\nMAINPID={}",
        std::process::id()
    ));
    let watchdog = Notifier::watchdog_interval().map(|interval| {
        let stop = servers.clone();
        tokio::spawn(async move {
            let pinger = Notifier::from_env();
            let mut tick = tokio::time::interval(interval);
            loop {
                tokio::select! {
                    _ = tick.tick() => pinger.notify("WATCHDOG=1"),
                    () = stop.cancelled() => break,
                }
            }
        })
    });

    shutdown.cancelled().await;
    tracing::info!("shutting down");
    notifier.notify("STOPPING=1\nSTATUS=stopping sessions");
    // Stop accepting first, then stop the guests, then let connections finish.
    servers.cancel();
    // Sessions not yet resumed stay as they are for the next start.
    resuming.abort();
    supervisor.shutdown(grace).await;
    if let Some(cluster) = &cluster {
        cluster.leave().await;
    }
    for task in [control_task, a2a_task]
        .into_iter()
        .chain(control_tcp_task)
        .chain(metrics_task)
        .chain(ui_task)
    {
        match tokio::time::timeout(Duration::from_secs(2), task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "listener ended with an error"),
            Ok(Err(e)) => tracing::warn!(error = %e, "listener task failed"),
            Err(_) => tracing::warn!("listener did not close within 2 s"),
        }
    }
    if let Some(task) = watchdog {
        task.abort();
    }
    store.close().await;
    let _ = std::fs::remove_file(&socket_path);
    if let Some(guard) = telemetry {
        // The flush blocks: off the runtime's threads.
        let _ = tokio::task::spawn_blocking(move || drop(guard)).await;
    }
    tracing::info!("roostd stopped");
    Ok(())
}

fn create_private_dir(path: &std::path::Path) -> Result<(), DaemonError> {
    let err = |source| DaemonError::StateDir {
        path: path.display().to_string(),
        source,
    };
    std::fs::create_dir_all(path).map_err(err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o750)).map_err(err)?;
    Ok(())
}
