//! The murmur host interfaces on [`GuestState`] for tools: `invoke` (tool
//! dispatch) and `manage` (the artifact manager); and one call of a WASM tool
//! or hook in a fresh store with its own deadline. The task's interfaces are
//! in `task_host.rs`.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use wasmtime::component::{ComponentExportIndex, ComponentNamedList, Lift, Lower};

use super::bindings::{Status, ToolInput, ToolResult, manage, murmur};
use super::catalog::{Catalog, Summary, Target};
use super::catalog::{Processes, ToolOutput, ToolRequest, ToolStatus};
use super::{Core, GuestState, PreparedComponent, PreparedHook, PreparedTool, StoreSpec};
use crate::logs::LogSink;
use crate::policy::CapabilityPolicy;

/// Limits and surroundings of every tool or hook call of one session.
#[derive(Clone)]
pub struct ToolSpec {
    pub session_id: String,
    /// The directory tools see (preopened as `.`, the cwd of native tools).
    pub workdir: PathBuf,
    /// The session's bookkeeping dir (installed tools, logs, tool output).
    pub bookkeeping: PathBuf,
    /// The capsule's guest environment (allow-listed and identity variables).
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    pub memory_bytes: u64,
    pub policy: Arc<CapabilityPolicy>,
    pub log: LogSink,
    pub stop: CancellationToken,
    /// Runs the session's native and shell tools (in the jail).
    pub processes: Arc<dyn Processes>,
    /// Where guests' refused requests are collected (agents trace them).
    pub notes: Option<Arc<super::Notes>>,
    /// The A2A task the session works on now, if any: tool calls made for it
    /// may ask its client for input.
    pub task: Option<super::TaskSlot>,
}

/// One session's tools: the `tools:` allow-list, its artifacts, and how to run them.
pub struct SessionTools {
    core: Arc<Core>,
    spec: ToolSpec,
    allowlist: HashSet<String>,
    artifacts: Arc<dyn Catalog>,
}

impl super::Runtime {
    /// The tool host a capsule's `invoke` and `manage` imports use.
    pub fn session_tools(
        &self,
        spec: ToolSpec,
        allowlist: HashSet<String>,
        artifacts: Arc<dyn Catalog>,
    ) -> Arc<SessionTools> {
        Arc::new(SessionTools {
            core: Arc::clone(&self.core),
            spec,
            allowlist,
            artifacts,
        })
    }
}

impl SessionTools {
    /// Dispatches one tool call; names outside the allow-list fail before
    /// dispatch. A WASM tool works on `task` (the caller's A2A task), else on
    /// the session's current one.
    pub async fn invoke(
        &self,
        name: &str,
        input: ToolInput,
        task: Option<Arc<dyn super::TaskIo>>,
    ) -> Result<ToolResult, String> {
        if !self.allowlist.contains(name) {
            return Err(format!(
                "tool '{name}' is not declared in manifest allowlist"
            ));
        }
        let started = Instant::now();
        let request = ToolRequest {
            data: input.data.clone(),
            log_path: input.log_path.clone(),
        };
        let (kind, result) = match self.artifacts.target(name, &self.spec.policy) {
            Target::Wasm(tool) => (
                "wasm",
                call_tool(&self.core, &tool, name, input, &self.spec, task).await,
            ),
            Target::Native(path) => (
                "native",
                self.spec
                    .processes
                    .native(name, &path, request)
                    .await
                    .map(into_wit),
            ),
            Target::Shell => (
                "shell",
                self.spec.processes.shell(name, request).await.map(into_wit),
            ),
            Target::Skill(text) => (
                "skill",
                Ok(ToolResult {
                    status: Status::Passed,
                    summary: Some(format!("Skill {name} guidance")),
                    data: Some(text.to_string()),
                    data_path: None,
                    truncated: false,
                    metadata: Vec::new(),
                }),
            ),
            Target::NotATool(runtime) => (
                "none",
                Err(format!(
                    "'{name}' is a {runtime} artifact, not a tool; it cannot be invoked"
                )),
            ),
            Target::Missing => (
                "none",
                Err(format!(
                    "tool '{name}' is allow-listed but not installed in this session: declare it \
                     under `artifacts:`, pull it with the artifact manager, or add it to \
                     capabilities.shell.allow"
                )),
            ),
        };
        let status = match &result {
            Ok(r) => match r.status {
                Status::Passed => "passed",
                Status::Failed => "failed",
                Status::Error => "error",
            },
            Err(_) => "dispatch-error",
        };
        tracing::info!(
            tool = name,
            kind,
            status,
            duration_us = started.elapsed().as_micros() as u64,
            "tool call"
        );
        result
    }
}

impl SessionTools {
    /// `invoke` with plain types, for the agent loop's tool calls.
    pub async fn invoke_data(
        &self,
        name: &str,
        data: Option<String>,
    ) -> Result<ToolOutput, String> {
        let input = ToolInput {
            data,
            log_path: None,
        };
        self.invoke(name, input, None).await.map(from_wit)
    }
}

pub(crate) fn from_wit(result: ToolResult) -> ToolOutput {
    ToolOutput {
        status: match result.status {
            Status::Passed => ToolStatus::Passed,
            Status::Failed => ToolStatus::Failed,
            Status::Error => ToolStatus::Error,
        },
        summary: result.summary,
        data: result.data,
        data_path: result.data_path,
        truncated: result.truncated,
        metadata: result.metadata,
    }
}

fn into_wit(output: ToolOutput) -> ToolResult {
    ToolResult {
        status: match output.status {
            ToolStatus::Passed => Status::Passed,
            ToolStatus::Failed => Status::Failed,
            ToolStatus::Error => Status::Error,
        },
        summary: output.summary,
        data: output.data,
        data_path: output.data_path,
        truncated: output.truncated,
        metadata: output.metadata,
    }
}

/// The record `murmur:hook/handler@0.1.0#handle` takes.
#[derive(wasmtime::component::ComponentType, wasmtime::component::Lower)]
#[component(record)]
struct HookEvent {
    kind: String,
    payload: String,
}

/// Runs a WASM tool once in a fresh store with the session's limits.
pub(crate) async fn call_tool(
    core: &Core,
    tool: &PreparedTool,
    name: &str,
    input: ToolInput,
    spec: &ToolSpec,
    task: Option<Arc<dyn super::TaskIo>>,
) -> Result<ToolResult, String> {
    let what = format!("tool '{name}'");
    let (result,) = Box::pin(call_export::<(ToolInput,), (ToolResult,)>(
        core,
        &tool.inner,
        tool.run,
        (input,),
        (spec, task),
        &what,
    ))
    .await?;
    Ok(result)
}

/// Runs a hook on one event in a fresh store with the session's limits.
pub(crate) async fn call_hook(
    core: &Core,
    hook: &PreparedHook,
    kind: &str,
    payload: &str,
    spec: &ToolSpec,
) -> Result<Option<String>, String> {
    let event = HookEvent {
        kind: kind.to_string(),
        payload: payload.to_string(),
    };
    let (answer,) = call_export::<(HookEvent,), (Result<Option<String>, String>,)>(
        core,
        &hook.inner,
        hook.handle,
        (event,),
        (spec, None),
        "hook",
    )
    .await?;
    answer
}

/// Instantiates `component` in a new store and calls one exported function,
/// each phase with a fresh deadline; failures are classified as for capsules.
async fn call_export<P, R>(
    core: &Core,
    component: &PreparedComponent,
    func: ComponentExportIndex,
    params: P,
    (spec, task): (&ToolSpec, Option<Arc<dyn super::TaskIo>>),
    what: &str,
) -> Result<R, String>
where
    P: ComponentNamedList + Lower + Send + Sync,
    R: ComponentNamedList + Lift + Send + Sync + 'static,
{
    let mut store = core
        .new_store(StoreSpec {
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
        })
        .map_err(|f| format!("{what} failed: {f}"))?;
    let timeout_secs = spec.timeout.as_secs();
    let waited = store.data().waited.clone();
    let call = async {
        store.data_mut().guard.arm();
        store.set_epoch_deadline(1);
        // Boxed: instantiation's state is dropped before the call, which may
        // wait for a long time (a driver on a slow model).
        let instance = Box::pin(component.pre.instantiate_async(&mut store)).await?;
        let func = instance
            .get_func(&mut store, func)
            .ok_or_else(|| wasmtime::format_err!("export is not a function"))?;
        let typed = func.typed::<P, R>(&store)?;
        store.data_mut().guard.arm();
        store.set_epoch_deadline(1);
        typed.call_async(&mut store, params).await
    };
    let outcome = tokio::select! {
        result = call => Some(result),
        () = waited.backstop(super::launch_backstop(spec.timeout)) => None,
    };
    match outcome {
        Some(Ok(result)) => Ok(result),
        None => Err(format!(
            "{what} failed: deadline exceeded after {timeout_secs} s"
        )),
        Some(Err(error)) => {
            let state = store.data();
            let failure = super::limits::classify(
                &error,
                &state.guard,
                &state.limiter,
                timeout_secs,
                &spec.log.stderr_tail(),
            );
            Err(format!("{what} failed: {failure}"))
        }
    }
}

fn no_tools() -> String {
    "the artifact manager is available to capsules only, not to tools or hooks".into()
}

fn summary(s: Summary) -> manage::ArtifactSummary {
    manage::ArtifactSummary {
        name: s.name,
        version: s.version,
        runtime: runtime_type(s.native),
    }
}

fn runtime_type(native: bool) -> manage::RuntimeType {
    if native {
        manage::RuntimeType::Native
    } else {
        manage::RuntimeType::Wasm
    }
}

impl murmur::tool_registry::invoke::Host for GuestState {
    async fn invoke(&mut self, name: String, input: ToolInput) -> Result<ToolResult, String> {
        match self.tools.clone() {
            Some(tools) => tools.invoke(&name, input, self.task.clone()).await,
            None => Err(format!(
                "tool '{name}': tools and hooks cannot invoke other tools"
            )),
        }
    }
}

impl manage::Host for GuestState {
    async fn list(&mut self) -> Vec<manage::ArtifactSummary> {
        match &self.tools {
            Some(tools) => tools
                .artifacts
                .list(&tools.spec.policy)
                .into_iter()
                .map(summary)
                .collect(),
            None => Vec::new(),
        }
    }

    async fn describe(&mut self, name: String) -> Result<manage::ArtifactInfo, String> {
        let tools = self.tools.as_ref().ok_or_else(no_tools)?;
        let info = tools.artifacts.describe(&name, &tools.spec.policy)?;
        Ok(manage::ArtifactInfo {
            name: info.name,
            version: info.version,
            description: info.description,
            tags: info.tags,
            runtime: runtime_type(info.native),
            input_schema: info.input_schema,
            output_schema: info.output_schema,
        })
    }

    async fn search(&mut self, query: String) -> Result<Vec<manage::ArtifactSummary>, String> {
        let tools = self.tools.clone().ok_or_else(no_tools)?;
        let found = tools.artifacts.search(&query).await?;
        Ok(found.into_iter().map(summary).collect())
    }

    async fn pull(
        &mut self,
        name: String,
        version: String,
    ) -> Result<manage::ArtifactSummary, String> {
        let tools = self.tools.clone().ok_or_else(no_tools)?;
        let pulled = tools.artifacts.pull(&name, &version, &*tools.core).await?;
        tracing::info!(artifact = %name, version = %version, "artifact pulled at run time");
        Ok(summary(pulled))
    }

    async fn remove(&mut self, name: String) -> Result<bool, String> {
        let tools = self.tools.clone().ok_or_else(no_tools)?;
        let removed = tools.artifacts.remove(&name).await?;
        if removed {
            tracing::info!(artifact = %name, "artifact removed at run time");
        }
        Ok(removed)
    }

    async fn diagnostics(&mut self) -> Result<manage::RuntimeState, String> {
        let tools = self.tools.as_ref().ok_or_else(no_tools)?;
        let installed = tools
            .artifacts
            .list(&tools.spec.policy)
            .into_iter()
            .map(summary)
            .collect();
        Ok(manage::RuntimeState {
            capsule_id: tools.spec.session_id.clone(),
            installed,
            capabilities: tools
                .artifacts
                .capabilities_json(&tools.spec.policy, &tools.allowlist),
        })
    }
}
