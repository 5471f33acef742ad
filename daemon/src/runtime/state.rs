//! The per-session store data (`Store<GuestState>`) and the View traits through
//! which WASI and wasi-http reach it.

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use std::sync::Arc;

use super::host::SessionTools;
use super::http::NetworkPolicyHooks;
use super::limits::{EpochGuard, StoreLimiter};

/// Everything one guest instance can reach, and the limits it runs under.
pub struct GuestState {
    pub(crate) wasi: WasiCtx,
    pub(crate) http: WasiHttpCtx,
    pub(crate) hooks: NetworkPolicyHooks,
    pub(crate) table: ResourceTable,
    pub(crate) limiter: StoreLimiter,
    pub(crate) guard: EpochGuard,
    /// Where guest output and text chunks go.
    pub(crate) log: crate::logs::LogSink,
    /// The session's tools and artifacts; `None` inside a tool or hook, which
    /// cannot invoke tools themselves.
    pub(crate) tools: Option<Arc<SessionTools>>,
    /// The A2A task this call works on (`request-input` asks its client).
    pub(crate) task: Option<std::sync::Arc<dyn super::TaskIo>>,
    /// Where `murmur:message/send` goes (set once the A2A gateway is up).
    pub(crate) outbox: Option<Arc<dyn super::Outbox>>,
    /// Time spent waiting for input (not counted against the deadline).
    pub(crate) waited: super::limits::Waited,
    /// Largest size a file the guest writes may reach (`runtime::files`).
    pub(crate) file_limit: u64,
    /// The entries the session's guests have made, and how many they may.
    pub(crate) entries: super::entries::Entries,
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for GuestState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}
