//! The murmur host interfaces on [`SessionState`]: `invoke` (tool dispatch),
//! `manage` (the artifact manager), `chunks` and `task`; and one call of a WASM
//! tool or hook in a fresh store with its own deadline.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use wasmtime::component::{ComponentExportIndex, ComponentNamedList, Lift, Lower};

use super::bindings::{Status, ToolInput, ToolResult, manage, murmur};
use super::{Core, PreparedComponent, PreparedHook, PreparedTool, SessionState, StoreSpec};
use crate::artifacts::{SessionArtifacts, Summary, Target};
use crate::logs::{LogSink, Stream};
use crate::policy::CapabilityPolicy;
use crate::tools::{self, ToolOutput, ToolRequest, ToolStatus};

/// Receives a guest's text chunks: `(text, thinking)`.
pub type ChunkSink = Arc<dyn Fn(&str, bool) + Send + Sync>;

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
    /// roostd's own binary, which jails native and shell tools before exec
    /// (`None`: tools run unjailed).
    pub jail_helper: Option<PathBuf>,
    /// Per-call pids cgroups for jailed tools, where the host allows them.
    pub pids: Option<Arc<crate::sandbox::cgroup::PidsCgroups>>,
    /// Where guests' refused requests are collected (agents trace them).
    pub denials: Option<Arc<super::Denials>>,
    /// Also receives `murmur:text/chunks` output (`thinking` for
    /// `emit-thinking-chunk`): an agent streams it to A2A subscribers.
    pub chunks: Option<ChunkSink>,
}

/// One session's tools: the `tools:` allow-list, its artifacts, and how to run them.
pub struct SessionTools {
    core: Arc<Core>,
    spec: ToolSpec,
    allowlist: HashSet<String>,
    artifacts: Arc<SessionArtifacts>,
}

impl super::Runtime {
    /// The tool host a capsule's `invoke` and `manage` imports use.
    pub fn session_tools(
        &self,
        spec: ToolSpec,
        allowlist: HashSet<String>,
        artifacts: Arc<SessionArtifacts>,
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
    /// Dispatches one tool call; names outside the allow-list fail before dispatch.
    pub async fn invoke(&self, name: &str, input: ToolInput) -> Result<ToolResult, String> {
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
        let context = || tools::ProcessContext {
            name: name.to_string(),
            workdir: self.spec.workdir.clone(),
            bookkeeping: self.spec.bookkeeping.clone(),
            env: self.spec.env.clone(),
            policy: Arc::clone(&self.spec.policy),
            timeout: self.spec.timeout,
            stop: self.spec.stop.clone(),
            jail_helper: self.spec.jail_helper.clone(),
            pids: self.spec.pids.clone(),
            memory_bytes: self.spec.memory_bytes,
        };
        let (kind, result) = match self.artifacts.target(name, &self.spec.policy) {
            Target::Wasm(tool) => (
                "wasm",
                call_tool(&self.core, &tool, name, input, &self.spec).await,
            ),
            Target::Native(path) => (
                "native",
                tools::native::run(&path, request, &context())
                    .await
                    .map(into_wit),
            ),
            Target::Shell => (
                "shell",
                tools::shell::run(request, &context()).await.map(into_wit),
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
        self.invoke(name, input).await.map(from_wit)
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
) -> Result<ToolResult, String> {
    let what = format!("tool '{name}'");
    let (result,) = call_export::<(ToolInput,), (ToolResult,)>(
        core,
        &tool.inner,
        tool.run,
        (input,),
        spec,
        &what,
    )
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
        spec,
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
    spec: &ToolSpec,
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
            denials: spec.denials.clone(),
            chunks: spec.chunks.clone(),
        })
        .map_err(|f| format!("{what} failed: {f}"))?;
    let timeout_secs = spec.timeout.as_secs();
    let call = async {
        store.data_mut().guard.arm();
        store.set_epoch_deadline(1);
        let instance = component.pre.instantiate_async(&mut store).await?;
        let func = instance
            .get_func(&mut store, func)
            .ok_or_else(|| wasmtime::format_err!("export is not a function"))?;
        let typed = func.typed::<P, R>(&store)?;
        store.data_mut().guard.arm();
        store.set_epoch_deadline(1);
        typed.call_async(&mut store, params).await
    };
    let outcome = tokio::time::timeout(super::launch_backstop(spec.timeout), call).await;
    match outcome {
        Ok(Ok(result)) => Ok(result),
        Err(_) => Err(format!(
            "{what} failed: deadline exceeded after {timeout_secs} s"
        )),
        Ok(Err(error)) => {
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

impl murmur::tool_registry::invoke::Host for SessionState {
    async fn invoke(&mut self, name: String, input: ToolInput) -> Result<ToolResult, String> {
        match self.tools.clone() {
            Some(tools) => tools.invoke(&name, input).await,
            None => Err(format!(
                "tool '{name}': tools and hooks cannot invoke other tools"
            )),
        }
    }
}

impl manage::Host for SessionState {
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
        let plan = tools.artifacts.fetch_for_pull(&name, &version).await?;
        let component = match plan.component_bytes() {
            Some(bytes) => Some(
                tools
                    .core
                    .prepare_tool(&plan.label(), bytes)
                    .await
                    .map_err(|e| e.to_string())?,
            ),
            None => None,
        };
        let pulled = tools.artifacts.complete_pull(plan, component).await?;
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

impl murmur::text::chunks::Host for SessionState {
    async fn emit_chunk(&mut self, chunk: String) {
        self.log.write(Stream::Stdout, chunk.as_bytes());
        if let Some(sink) = &self.chunks {
            sink(&chunk, false);
        }
    }

    async fn emit_thinking_chunk(&mut self, chunk: String) {
        self.log.write(Stream::Stdout, chunk.as_bytes());
        if let Some(sink) = &self.chunks {
            sink(&chunk, true);
        }
    }
}

impl murmur::task::task::Host for SessionState {
    async fn request_input(&mut self, _prompt: String) -> wasmtime::Result<String> {
        Err(wasmtime::format_err!(
            "request-input: this call is not handling an A2A task, so there is no peer to ask"
        ))
    }
}
