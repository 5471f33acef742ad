//! The only module that touches wasmtime: the process-wide Engine, Linker and epoch
//! ticker (once per process), prepared components (once per content hash), one
//! `Store<GuestState>` per guest run, and the murmur host interfaces
//! (`invoke`, `manage`, `chunks`, `task`) guests import.

mod bindings;
mod cache;
mod call;
mod catalog;
mod entries;
mod files;
mod host;
mod http;
mod limits;
mod outbox;
mod output;
pub mod peer_stream;
mod run;
pub use run::TaskMessage;
mod state;
mod task_io;
mod ticker;

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use wasmtime::component::{Component, ComponentExportIndex, InstancePre, Linker, ResourceTable};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store};
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};
use wasmtime_wasi_http::WasiHttpCtx;

pub use call::HookError;
pub use catalog::{
    Catalog, Compiler, Info, ManageError, PortError, Processes, Summary, Target, ToolError,
    ToolOutput, ToolRequest, ToolStatus,
};
pub use host::{SessionTools, ToolSpec};
pub use http::{Note, Notes};
pub use limits::GuestFailure;
pub use outbox::{
    OutMessage, Outbox, PeerAnswer, PeerBinding, PeerCall, PeerInterface, PeerOp, PeerTarget,
    PeerTask, SendError, SentTask,
};
pub use state::GuestState;
pub use task_io::{
    Answer, ArtifactUpdate, InputError, Outcome, Prompt, Reply, TaskIo, TaskSlot, trace_id_of,
};

use crate::ids::SessionId;
use crate::logs::{LogSink, Stream};
use crate::metrics::Metrics;
use crate::policy::CapabilityPolicy;
use crate::policy::fence::Access;

/// Interface instance a script capsule must export; the only name resolved.
pub const CAPSULE_RUN_EXPORT: &str = "murmur:capsule/run@0.1.0";
/// Interface instance a script capsule that serves A2A tasks exports instead.
pub const A2A_HANDLER_EXPORT: &str = "murmur:a2a/handler@0.1.0";
/// The same, with every part in and out.
pub const A2A_HANDLER2_EXPORT: &str = "murmur:a2a/handler@0.2.0";
/// Interface instance a tool or driver must export.
pub const TOOL_RUN_EXPORT: &str = "murmur:tool/run@0.1.0";
/// Interface instance a hook must export.
pub const HOOK_EXPORT: &str = "murmur:hook/handler@0.1.0";

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
    #[error("{what} is not a valid WebAssembly component: {message}")]
    Compile { what: String, message: String },
    #[error(
        "{what} does not export `{export}` (only the versioned name is accepted; \
         rebuild it against wit/ {package})"
    )]
    ExportMissing {
        what: String,
        export: &'static str,
        package: &'static str,
    },
    #[error("{what} cannot be linked: {message}")]
    Link { what: String, message: String },
}

/// Process-wide sizing of the Engine.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    pub max_instances: u32,
    pub max_memory_bytes: u64,
    /// Where compiled components are persisted.
    pub cache_dir: PathBuf,
}

/// A component compiled and pre-linked once per content hash, shared by every
/// session (and every role: capsule, tool, driver, hook) that runs those bytes.
pub(crate) struct PreparedComponent {
    sha256: String,
    component: Component,
    pre: InstancePre<GuestState>,
}

/// A script capsule ready to instantiate: it runs once (`run`) or serves
/// A2A tasks (`handle`).
pub struct PreparedCapsule {
    inner: Arc<PreparedComponent>,
    entry: Entry,
}

enum Entry {
    Run(bindings::guest::capsule::CapsuleIndices),
    Handle(bindings::guest::agent::AgentIndices),
    Handle2(bindings::guest::agent2::Agent2Indices),
}

impl PreparedCapsule {
    pub fn sha256(&self) -> &str {
        &self.inner.sha256
    }

    /// Whether it exports `murmur:a2a/handler` (0.2.0 or 0.1.0; it is
    /// called per task).
    pub fn serves_a2a(&self) -> bool {
        matches!(self.entry, Entry::Handle(_) | Entry::Handle2(_))
    }
}

/// A WASM tool or driver (`murmur:tool/run@0.1.0`) ready to instantiate per call.
pub struct PreparedTool {
    inner: Arc<PreparedComponent>,
    exports: bindings::guest::tool::ToolIndices,
}

impl PreparedTool {
    pub fn sha256(&self) -> &str {
        &self.inner.sha256
    }
}

/// A hook (`murmur:hook/handler@0.1.0`) ready to instantiate per event.
pub struct PreparedHook {
    inner: Arc<PreparedComponent>,
    exports: bindings::guest::hook::HookIndices,
}

/// What one run of a script capsule gets (and each task of one that serves A2A).
#[derive(Clone)]
pub struct ScriptLaunch {
    pub session_id: SessionId,
    /// The directory preopened as `.`.
    pub workdir: PathBuf,
    /// Guest environment, identity variables last.
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    pub memory_bytes: u64,
    pub policy: Arc<CapabilityPolicy>,
    pub log: LogSink,
    /// The session's tools and artifact manager (`invoke`, `manage`).
    pub tools: Option<Arc<SessionTools>>,
    /// Where the capsule's sends and policy denials are noted for its
    /// trace.
    pub notes: Option<Arc<Notes>>,
}

/// The shareable part of the runtime: what a host call needs to run a tool.
pub(crate) struct Core {
    engine: Engine,
    linker: Linker<GuestState>,
    cache: cache::ComponentCache,
    outbox: std::sync::OnceLock<Arc<dyn Outbox>>,
    /// The entries guests have made in each workdir (`files.rs`).
    made: entries::Made,
}

/// Bytes of a freed linear memory slot kept resident (and reset by copying).
const KEEP_RESIDENT_MEMORY: usize = 256 << 10;
/// Bytes of a freed table slot kept resident.
const KEEP_RESIDENT_TABLE: usize = 16 << 10;

/// The one Engine of the process, with its Linker, ticker and component cache.
pub struct Runtime {
    core: Arc<Core>,
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
            .max_memory_size(usize::try_from(config.max_memory_bytes).unwrap_or(usize::MAX))
            // A freed slot is reset by copying back the pages the guest
            // dirtied (found with PAGEMAP_SCAN where the kernel has it, 6.7+),
            // up to these sizes, instead of unmapping them: the next
            // instance in the slot takes no page faults and no TLB
            // shootdown. A freed slot keeps at most this much resident.
            .pagemap_scan(wasmtime::Enabled::Auto)
            .linear_memory_keep_resident(KEEP_RESIDENT_MEMORY)
            .table_keep_resident(KEEP_RESIDENT_TABLE);
        let mut wasm = Config::new();
        wasm.wasm_component_model(true)
            .epoch_interruption(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&wasm).map_err(engine_err)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(engine_err)?;
        files::add_to_linker(&mut linker).map_err(engine_err)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).map_err(engine_err)?;
        bindings::add_to_linker(&mut linker).map_err(engine_err)?;
        let ticker = ticker::EpochTicker::spawn(engine.weak())
            .map_err(|e| RuntimeError::Engine(format!("cannot start epoch ticker: {e}")))?;
        Ok(Self {
            core: Arc::new(Core {
                cache: cache::ComponentCache::new(config.cache_dir.clone(), metrics),
                outbox: std::sync::OnceLock::new(),
                made: entries::Made::default(),
                engine,
                linker,
            }),
            _ticker: ticker,
        })
    }

    /// Where guests' `murmur:message/send` calls go (set once, at start-up).
    pub fn set_outbox(&self, outbox: Arc<dyn Outbox>) {
        let _ = self.core.outbox.set(outbox);
    }

    /// Compiles (or finds in the cache) and pre-links the script capsule at
    /// `path`; it must export `run`, or `handle` to serve A2A tasks. `file`
    /// is `path` opened by the caller, which decided what the path may name
    /// (staging opens it inside the capsule directory, following no link).
    pub async fn prepare(
        &self,
        path: &Path,
        file: std::fs::File,
    ) -> Result<Arc<PreparedCapsule>, RuntimeError> {
        let what = path.display().to_string();
        let inner = self.core.prepare_file(path, file).await?;
        // A component exporting both handlers is called through the newer.
        let entry = if export_func(&inner.component, A2A_HANDLER2_EXPORT, "handle").is_some() {
            Entry::Handle2(
                bindings::guest::agent2::Agent2Indices::new(&inner.pre)
                    .map_err(|e| link_error(&what, e))?,
            )
        } else if export_func(&inner.component, A2A_HANDLER_EXPORT, "handle").is_some() {
            Entry::Handle(
                bindings::guest::agent::AgentIndices::new(&inner.pre)
                    .map_err(|e| link_error(&what, e))?,
            )
        } else if export_func(&inner.component, CAPSULE_RUN_EXPORT, "run").is_some() {
            Entry::Run(
                bindings::guest::capsule::CapsuleIndices::new(&inner.pre)
                    .map_err(|e| link_error(&what, e))?,
            )
        } else {
            return Err(RuntimeError::ExportMissing {
                what,
                export: CAPSULE_RUN_EXPORT,
                package: "murmur:capsule@0.1.0 (or export murmur:a2a/handler@0.2.0 or @0.1.0 to serve A2A tasks)",
            });
        };
        Ok(Arc::new(PreparedCapsule { inner, entry }))
    }

    /// Compiles (or finds in the cache) a tool or driver component from a bundle.
    pub async fn prepare_tool(
        &self,
        what: &str,
        bytes: Vec<u8>,
    ) -> Result<Arc<PreparedTool>, RuntimeError> {
        self.core.prepare_tool(what, bytes).await
    }

    /// Compiles (or finds in the cache) a hook component from a bundle.
    pub async fn prepare_hook(
        &self,
        what: &str,
        bytes: Vec<u8>,
    ) -> Result<Arc<PreparedHook>, RuntimeError> {
        let inner = self.core.prepare_bytes(what, bytes).await?;
        if export_func(&inner.component, HOOK_EXPORT, "handle").is_none() {
            return Err(RuntimeError::ExportMissing {
                what: what.to_string(),
                export: HOOK_EXPORT,
                package: "murmur:hook@0.1.0",
            });
        }
        let exports =
            bindings::guest::hook::HookIndices::new(&inner.pre).map_err(|e| link_error(what, e))?;
        Ok(Arc::new(PreparedHook { inner, exports }))
    }

    /// Runs a WASM tool once with `data` as its input, as `invoke` would but
    /// without a capsule: the benchmark floor.
    pub async fn call_tool_data(
        &self,
        tool: &PreparedTool,
        name: &str,
        data: Option<String>,
        spec: &ToolSpec,
    ) -> Result<Option<String>, ToolError> {
        self.run_tool(tool, name, data, spec).await.map(|r| r.data)
    }

    /// Runs a WASM tool (or driver) once with `data` as its input and returns
    /// its whole result: the agent loop's driver calls.
    pub async fn run_tool(
        &self,
        tool: &PreparedTool,
        name: &str,
        data: Option<String>,
        spec: &ToolSpec,
    ) -> Result<ToolOutput, ToolError> {
        let input = bindings::ToolInput {
            data,
            log_path: None,
        };
        Box::pin(call::call_tool(&self.core, tool, name, input, spec, None))
            .await
            .map(host::from_wit)
    }

    /// Runs a hook on one event with the session's limits: `Ok(Some(json))` when it
    /// answers, `Err` with a classified reason when it fails or runs out of time.
    pub async fn call_hook(
        &self,
        hook: &PreparedHook,
        kind: &str,
        payload: &str,
        spec: &ToolSpec,
    ) -> Result<Option<String>, HookError> {
        call::call_hook(&self.core, hook, kind, payload, spec).await
    }
}

/// Everything a new store is built from.
pub(crate) struct StoreSpec<'a> {
    session_id: &'a str,
    workdir: &'a Path,
    env: &'a [(String, String)],
    timeout: Duration,
    memory_bytes: u64,
    policy: Arc<CapabilityPolicy>,
    log: LogSink,
    stop: CancellationToken,
    tools: Option<Arc<SessionTools>>,
    notes: Option<Arc<Notes>>,
    task: Option<Arc<dyn TaskIo>>,
}

#[async_trait::async_trait]
impl Compiler for Core {
    async fn compile_tool(
        &self,
        what: &str,
        bytes: Vec<u8>,
    ) -> Result<Arc<PreparedTool>, RuntimeError> {
        self.prepare_tool(what, bytes).await
    }
}

impl Core {
    async fn prepare_file(
        &self,
        path: &Path,
        file: std::fs::File,
    ) -> Result<Arc<PreparedComponent>, RuntimeError> {
        self.cache
            .get_file(&self.engine, (path, file), |sha256, component| {
                self.pre_link(path.display().to_string(), sha256, component)
            })
            .await
    }

    async fn prepare_bytes(
        &self,
        what: &str,
        bytes: Vec<u8>,
    ) -> Result<Arc<PreparedComponent>, RuntimeError> {
        self.cache
            .get_bytes(&self.engine, what, bytes, |sha256, component| {
                self.pre_link(what.to_string(), sha256, component)
            })
            .await
    }

    async fn prepare_tool(
        &self,
        what: &str,
        bytes: Vec<u8>,
    ) -> Result<Arc<PreparedTool>, RuntimeError> {
        let inner = self.prepare_bytes(what, bytes).await?;
        if export_func(&inner.component, TOOL_RUN_EXPORT, "run").is_none() {
            return Err(RuntimeError::ExportMissing {
                what: what.to_string(),
                export: TOOL_RUN_EXPORT,
                package: "murmur:tool@0.1.0",
            });
        }
        let exports =
            bindings::guest::tool::ToolIndices::new(&inner.pre).map_err(|e| link_error(what, e))?;
        Ok(Arc::new(PreparedTool { inner, exports }))
    }

    fn pre_link(
        &self,
        what: String,
        sha256: String,
        component: Component,
    ) -> Result<PreparedComponent, RuntimeError> {
        let pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| RuntimeError::Link {
                what,
                message: format!("{e:#}"),
            })?;
        Ok(PreparedComponent {
            sha256,
            component,
            pre,
        })
    }

    fn new_store(&self, spec: StoreSpec<'_>) -> Result<Store<GuestState>, GuestFailure> {
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(output::GuestOutput::new(spec.log.clone(), Stream::Stdout))
            .stderr(output::GuestOutput::new(spec.log.clone(), Stream::Stderr))
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        for (key, value) in spec.env {
            wasi.env(key, value);
        }
        // The workdir and each extra path, opened without following a link
        // and held against roostd's own files now, at this store (a link a
        // guest planted in a writable grant between two runs leads
        // nowhere); each is handed to WASI by its descriptor.
        let fence = &spec.policy.fence;
        let preopen = |wasi: &mut WasiCtxBuilder,
                       path: &Path,
                       guest: String,
                       access: Access,
                       workdir: bool|
         -> Result<(), GuestFailure> {
            let file = match fence.open(path, access, workdir, libc::O_PATH) {
                Ok(file) => file,
                // A grant removed since staging is left out, as is a file
                // (WASI preopens directories only); the workdir must be.
                Err(e) if e.is_not_found() && !workdir => return Ok(()),
                Err(e) => {
                    return Err(GuestFailure::Setup {
                        message: format!("cannot open {}: {e}", path.display()),
                    });
                }
            };
            if !file.metadata().is_ok_and(|m| m.is_dir()) {
                return Ok(());
            }
            let perms = match access {
                Access::Read => FsPerms::ReadOnly,
                Access::Write => FsPerms::ReadWrite,
            };
            let by_descriptor = format!("/proc/self/fd/{}", file.as_raw_fd());
            wasi.preopened_dir(&by_descriptor, guest, perms)
                .map(|_| ())
                .map_err(|e| GuestFailure::Setup {
                    message: format!("cannot preopen {}: {e:#}", path.display()),
                })
        };
        preopen(&mut wasi, spec.workdir, ".".into(), Access::Write, true)?;
        for (dir, access) in spec
            .policy
            .read_only
            .iter()
            .map(|p| (p, Access::Read))
            .chain(spec.policy.read_write.iter().map(|p| (p, Access::Write)))
        {
            preopen(&mut wasi, dir, dir.display().to_string(), access, false)?;
        }
        let memory_limit = usize::try_from(spec.memory_bytes).unwrap_or(usize::MAX);
        let mut guard = limits::EpochGuard::new(spec.stop);
        guard.set_budget(spec.timeout);
        let file_limit = spec.policy.limits.file_size_bytes();
        let state = GuestState {
            file_limit,
            entries: self.made.of(spec.workdir, spec.policy.limits.files()),
            wasi: wasi.build(),
            http: WasiHttpCtx::new(),
            hooks: http::NetworkPolicyHooks {
                policy: spec.policy,
                session_id: spec.session_id.into(),
                notes: spec.notes,
            },
            table: ResourceTable::new(),
            limiter: limits::StoreLimiter::new(memory_limit),
            guard,
            log: spec.log,
            tools: spec.tools,
            task: spec.task,
            outbox: self.outbox.get().cloned(),
            waited: limits::Waited::default(),
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limiter);
        store.epoch_deadline_callback(|mut ctx| ctx.data_mut().guard.on_tick());
        Ok(store)
    }
}

/// The index of `func` inside the exported interface instance `iface`.
fn export_func(component: &Component, iface: &str, func: &str) -> Option<ComponentExportIndex> {
    let instance = component.get_export_index(None, iface)?;
    component.get_export_index(Some(&instance), func)
}

/// An export whose name is right but whose signature is not the WIT's.
fn link_error(what: &str, error: wasmtime::Error) -> RuntimeError {
    RuntimeError::Link {
        what: what.to_string(),
        message: format!("{error:#}"),
    }
}
