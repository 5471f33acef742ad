//! One guest call, the way every guest is called (a capsule's `run`, an A2A
//! task's `handle`, a tool's `run`, a hook's `handle`): instantiation and the
//! call each with a fresh epoch budget, raced against the wall-clock backstop
//! (time waited for input aside) and the caller's cancel and stop tokens, and
//! a failure classified; and the calls of a session's WASM tools and hooks,
//! each in a fresh store of its own.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use wasmtime::Store;

use super::bindings::guest::{
    hook::exports::murmur::hook::handler, tool::exports::murmur::tool::run,
};
use super::bindings::{Status, ToolInput, ToolResult};
use super::catalog::ToolError;
use super::host::ToolSpec;
use super::limits::{self, GuestFailure};
use super::{Core, GuestState, PreparedComponent, PreparedHook, PreparedTool, StoreSpec};

/// The instantiate-and-call future a caller hands to [`call_guest`].
pub(crate) type GuestCall<'s, R> = Pin<Box<dyn Future<Output = wasmtime::Result<R>> + Send + 's>>;

/// Starts a fresh epoch budget (one for instantiation, another for the call).
pub(crate) fn fresh_budget(store: &mut Store<GuestState>) {
    store.data_mut().guard.arm();
    store.set_epoch_deadline(1);
}

/// Instantiates `component` in `store`. Boxed: instantiation's state is
/// dropped before the call, which may wait a long time (a driver on a slow
/// model), instead of staying in the call's future all along.
pub(crate) async fn instantiate(
    component: &PreparedComponent,
    store: &mut Store<GuestState>,
) -> wasmtime::Result<wasmtime::component::Instance> {
    Box::pin(component.pre.instantiate_async(store)).await
}

/// What ends a call from outside besides its own deadline.
#[derive(Default, Clone, Copy)]
pub(crate) struct Halts<'a> {
    /// The client canceled the task: the call ends as
    /// [`GuestFailure::Canceled`], also when the guest trapped because of it.
    pub cancel: Option<&'a CancellationToken>,
    /// The session is stopping: [`GuestFailure::Stopped`] at once (the epoch
    /// guard's own stop token interrupts running guest code as well).
    pub stop: Option<&'a CancellationToken>,
}

/// Runs `call` (which instantiates and calls, and should call
/// [`fresh_budget`] between the two) in `store`.
pub(crate) async fn call_guest<R>(
    store: &mut Store<GuestState>,
    halts: Halts<'_>,
    call: impl for<'s> FnOnce(&'s mut Store<GuestState>) -> GuestCall<'s, R>,
) -> Result<R, GuestFailure> {
    let budget = store.data().guard.budget();
    let seconds = budget.as_secs();
    let waited = store.data().waited.clone();
    fresh_budget(store);
    let result = tokio::select! {
        result = call(store) => result,
        () = until(halts.cancel) => return Err(GuestFailure::Canceled),
        () = until(halts.stop) => return Err(GuestFailure::Stopped),
        () = waited.backstop(backstop(budget)) => {
            return Err(GuestFailure::DeadlineExceeded { seconds });
        }
    };
    match result {
        Ok(value) => Ok(value),
        // Canceled while it waited for input: the request trapped.
        Err(_) if halts.cancel.is_some_and(CancellationToken::is_cancelled) => {
            Err(GuestFailure::Canceled)
        }
        Err(error) => {
            let state = store.data();
            Err(limits::classify(
                &error,
                &state.guard,
                &state.limiter,
                seconds,
                &state.log.stderr_tail(),
            ))
        }
    }
}

/// Resolves when `token` is cancelled; never without one.
async fn until(token: Option<&CancellationToken>) {
    match token {
        Some(token) => token.cancelled().await,
        None => std::future::pending().await,
    }
}

/// How long a guest call may take in wall-clock time before it is stopped
/// whatever its epoch deadline says: host-side waits (an HTTP response) do
/// not tick the epoch.
fn backstop(budget: Duration) -> Duration {
    budget * 2 + Duration::from_secs(1)
}

/// Why a hook gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// It trapped, ran out of time or memory.
    #[error("hook failed: {0}")]
    Guest(GuestFailure),
    /// It answered with an error.
    #[error("{0}")]
    Refused(String),
}

/// Runs a WASM tool once in a fresh store with the session's limits.
pub(crate) async fn call_tool(
    core: &Core,
    tool: &PreparedTool,
    name: &str,
    input: ToolInput,
    spec: &ToolSpec,
    task: Option<Arc<dyn super::TaskIo>>,
) -> Result<ToolResult, ToolError> {
    let input = run::ToolInput {
        data: input.data,
        log_path: input.log_path,
    };
    let (component, exports) = (Arc::clone(&tool.inner), tool.exports.clone());
    let result = Box::pin(call_in_fresh_store(core, spec, task, move |store| {
        Box::pin(async move {
            let instance = instantiate(&component, store).await?;
            let tool = exports.load(&mut *store, &instance)?;
            fresh_budget(store);
            tool.murmur_tool_run().call_run(&mut *store, &input).await
        })
    }))
    .await
    .map_err(|failure| ToolError::Guest {
        what: format!("tool '{name}'"),
        failure,
    })?;
    Ok(from_export(result))
}

/// Runs a hook on one event in a fresh store with the session's limits.
pub(crate) async fn call_hook(
    core: &Core,
    hook: &PreparedHook,
    kind: &str,
    payload: &str,
    spec: &ToolSpec,
) -> Result<Option<String>, HookError> {
    let event = handler::Event {
        kind: kind.to_string(),
        payload: payload.to_string(),
    };
    let (component, exports) = (Arc::clone(&hook.inner), hook.exports.clone());
    let answer = call_in_fresh_store(core, spec, None, move |store| {
        Box::pin(async move {
            let instance = instantiate(&component, store).await?;
            let hook = exports.load(&mut *store, &instance)?;
            fresh_budget(store);
            hook.murmur_hook_handler()
                .call_handle(&mut *store, &event)
                .await
        })
    })
    .await
    .map_err(HookError::Guest)?;
    answer.map_err(HookError::Refused)
}

/// A tool's or hook's call in a new store of its own (the session's current
/// task unless `task` names the caller's); stopped through the epoch guard.
async fn call_in_fresh_store<R>(
    core: &Core,
    spec: &ToolSpec,
    task: Option<Arc<dyn super::TaskIo>>,
    call: impl for<'s> FnOnce(&'s mut wasmtime::Store<GuestState>) -> GuestCall<'s, R>,
) -> Result<R, GuestFailure> {
    let mut store = core.new_store(StoreSpec {
        session_id: &spec.session_id,
        workdir: &spec.workdir,
        env: &spec.env,
        timeout: spec.timeout,
        memory_bytes: spec.memory_bytes,
        policy: Arc::clone(&spec.policy),
        log: spec.log.clone(),
        stop: spec.stop.child_token(),
        tools: None,
        notes: spec.notes.clone(),
        task: task.or_else(|| {
            spec.task
                .as_ref()
                .and_then(|slot| slot.lock().ok().and_then(|t| t.clone()))
        }),
    })?;
    call_guest(&mut store, Halts::default(), call).await
}

/// A tool's result as its export gives it, in the types `invoke` answers with.
fn from_export(result: run::ToolResult) -> ToolResult {
    ToolResult {
        status: match result.status {
            run::Status::Passed => Status::Passed,
            run::Status::Failed => Status::Failed,
            run::Status::Error => Status::Error,
        },
        summary: result.summary,
        data: result.data,
        data_path: result.data_path,
        truncated: result.truncated,
        metadata: result.metadata,
    }
}
