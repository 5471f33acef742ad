//! The only module that touches wasmtime: the process-wide Engine, Linker and epoch
//! ticker (once per process), prepared components (once per content hash), and
//! one `Store<SessionState>` per guest run (once per session attempt).

mod cache;
mod http;
mod limits;
mod output;
mod state;
mod ticker;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use wasmtime::component::{Component, ComponentExportIndex, InstancePre, Linker, ResourceTable};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store};
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};
use wasmtime_wasi_http::WasiHttpCtx;

pub use limits::GuestFailure;
pub use state::SessionState;

use crate::logs::{LogSink, Stream};
use crate::metrics::Metrics;
use crate::policy::CapabilityPolicy;

/// Interface instance a script capsule must export; the only name resolved.
pub const CAPSULE_RUN_EXPORT: &str = "murmur:capsule/run@0.1.0";

/// Failures to set up the Engine or prepare a component (before any guest runs).
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("wasmtime engine: {0}")]
    Engine(String),
    #[error("cannot read component {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is {size} bytes; components may be at most {max} bytes", path.display())]
    TooLarge { path: PathBuf, size: u64, max: u64 },
    #[error("{} is not a valid WebAssembly component: {message}", path.display())]
    Compile { path: PathBuf, message: String },
    #[error(
        "{} does not export `{CAPSULE_RUN_EXPORT}` (only the versioned name is accepted; \
         rebuild the capsule against wit/ murmur:capsule@0.1.0)",
        path.display()
    )]
    ExportMissing { path: PathBuf },
    #[error("{} cannot be linked: {message}", path.display())]
    Link { path: PathBuf, message: String },
}

/// Process-wide sizing of the Engine.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    pub max_instances: u32,
    pub max_memory_bytes: u64,
    /// Where compiled components are persisted.
    pub cache_dir: PathBuf,
}

/// A component compiled and pre-linked once, shared by every session that runs it.
pub struct PreparedCapsule {
    sha256: String,
    pre: InstancePre<SessionState>,
    run: ComponentExportIndex,
}

impl PreparedCapsule {
    pub fn sha256(&self) -> &str {
        &self.sha256
    }
}

/// What one run of a script capsule gets.
pub struct ScriptLaunch {
    pub session_id: String,
    /// The directory preopened as `.`.
    pub workdir: PathBuf,
    /// Guest environment, identity variables last.
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    pub memory_bytes: u64,
    pub policy: Arc<CapabilityPolicy>,
    pub log: LogSink,
}

/// The one Engine of the process, with its Linker, ticker and component cache.
pub struct Runtime {
    engine: Engine,
    linker: Linker<SessionState>,
    cache: cache::ComponentCache,
    _ticker: ticker::EpochTicker,
}

impl Runtime {
    pub fn new(config: &RuntimeConfig, metrics: Arc<Metrics>) -> Result<Self, RuntimeError> {
        let engine_err = |e: wasmtime::Error| RuntimeError::Engine(format!("{e:#}"));
        let mut pool = PoolingAllocationConfig::default();
        // A Rust wasip2 component is one main module plus a few small shim modules.
        pool.total_component_instances(config.max_instances)
            .total_core_instances(config.max_instances.saturating_mul(8))
            .total_memories(config.max_instances.saturating_mul(2))
            .total_tables(config.max_instances.saturating_mul(8))
            .total_stacks(config.max_instances)
            .max_memory_size(usize::try_from(config.max_memory_bytes).unwrap_or(usize::MAX));
        let mut wasm = Config::new();
        wasm.wasm_component_model(true)
            .epoch_interruption(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&wasm).map_err(engine_err)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(engine_err)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).map_err(engine_err)?;
        let ticker = ticker::EpochTicker::spawn(engine.weak())
            .map_err(|e| RuntimeError::Engine(format!("cannot start epoch ticker: {e}")))?;
        Ok(Self {
            cache: cache::ComponentCache::new(config.cache_dir.clone(), metrics),
            engine,
            linker,
            _ticker: ticker,
        })
    }

    /// Compiles (or finds in the cache) and pre-links the script capsule at `path`.
    pub async fn prepare(&self, path: &Path) -> Result<Arc<PreparedCapsule>, RuntimeError> {
        self.cache
            .get(&self.engine, path, |sha256, component: Component| {
                let link_err = |e: wasmtime::Error| RuntimeError::Link {
                    path: path.to_path_buf(),
                    message: format!("{e:#}"),
                };
                let missing = || RuntimeError::ExportMissing {
                    path: path.to_path_buf(),
                };
                let iface = component
                    .get_export_index(None, CAPSULE_RUN_EXPORT)
                    .ok_or_else(missing)?;
                let run = component
                    .get_export_index(Some(&iface), "run")
                    .ok_or_else(missing)?;
                let pre = self.linker.instantiate_pre(&component).map_err(link_err)?;
                Ok(PreparedCapsule { sha256, pre, run })
            })
            .await
    }

    /// Instantiates and runs a script capsule to completion, a stop request, or a failure.
    pub async fn run_script(
        &self,
        prepared: &PreparedCapsule,
        launch: ScriptLaunch,
        stop: CancellationToken,
    ) -> Result<(), GuestFailure> {
        let timeout_secs = launch.timeout.as_secs();
        let log = launch.log.clone();
        let mut store = self.new_store(launch, stop.clone())?;
        // Host-side waits (e.g. an HTTP response) do not tick the epoch, so the
        // wall clock also bounds both phases together.
        let backstop = launch_backstop(store.data().guard_budget());
        let outcome = {
            let call = call_run(&mut store, prepared);
            tokio::select! {
                result = call => Some(result),
                () = stop.cancelled() => None,
                () = tokio::time::sleep(backstop) => {
                    return Err(GuestFailure::DeadlineExceeded { seconds: timeout_secs });
                }
            }
        };
        match outcome {
            None => Err(GuestFailure::Stopped),
            Some(Ok(())) => Ok(()),
            Some(Err(error)) => {
                let state = store.data();
                Err(limits::classify(
                    &error,
                    &state.guard,
                    &state.limiter,
                    timeout_secs,
                    &log.stderr_tail(),
                ))
            }
        }
    }

    fn new_store(
        &self,
        launch: ScriptLaunch,
        stop: CancellationToken,
    ) -> Result<Store<SessionState>, GuestFailure> {
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(output::GuestOutput::new(launch.log.clone(), Stream::Stdout))
            .stderr(output::GuestOutput::new(launch.log.clone(), Stream::Stderr))
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        for (key, value) in &launch.env {
            wasi.env(key, value);
        }
        wasi.preopened_dir(&launch.workdir, ".", FsPerms::ReadWrite)
            .map_err(|e| GuestFailure::Setup {
                message: format!("cannot preopen workdir {}: {e:#}", launch.workdir.display()),
            })?;
        let memory_limit = usize::try_from(launch.memory_bytes).unwrap_or(usize::MAX);
        let mut guard = limits::EpochGuard::new(stop);
        guard.set_budget(launch.timeout);
        let state = SessionState {
            wasi: wasi.build(),
            http: WasiHttpCtx::new(),
            hooks: http::NetworkPolicyHooks {
                policy: launch.policy,
                session_id: launch.session_id.into(),
            },
            table: ResourceTable::new(),
            limiter: limits::StoreLimiter::new(memory_limit),
            guard,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limiter);
        store.epoch_deadline_callback(|mut ctx| ctx.data_mut().guard.on_tick());
        Ok(store)
    }
}

/// Instantiation and `run`, each with a fresh budget.
async fn call_run(
    store: &mut Store<SessionState>,
    prepared: &PreparedCapsule,
) -> wasmtime::Result<()> {
    store.data_mut().guard.arm();
    store.set_epoch_deadline(1);
    let instance = prepared.pre.instantiate_async(&mut *store).await?;
    let func = instance
        .get_func(&mut *store, prepared.run)
        .ok_or_else(|| {
            wasmtime::format_err!("export `{CAPSULE_RUN_EXPORT}#run` is not a function")
        })?;
    let run = func.typed::<(), ()>(&*store)?;
    store.data_mut().guard.arm();
    store.set_epoch_deadline(1);
    run.call_async(&mut *store, ()).await
}

fn launch_backstop(budget: Duration) -> Duration {
    budget * 2 + Duration::from_secs(1)
}
