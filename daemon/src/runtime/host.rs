//! The murmur host interfaces on [`GuestState`] for tools: `invoke` (tool
//! dispatch) and `manage` (the artifact manager); and one call of a WASM tool
//! or hook in a fresh store with its own deadline. The task's interfaces are
//! in `task_host.rs`.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::bindings::guest::{
    hook::exports::murmur::hook::handler, tool::exports::murmur::tool::run,
};
use super::bindings::{Status, ToolInput, ToolResult, manage, murmur};
use super::call::{GuestCall, Halts, call_guest, fresh_budget};
use super::catalog::{Catalog, ManageError, Summary, Target, ToolError};
use super::catalog::{Processes, ToolOutput, ToolRequest, ToolStatus};
use super::{Core, GuestFailure, GuestState, PreparedHook, PreparedTool, StoreSpec};
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
    ) -> Result<ToolResult, ToolError> {
        if !self.allowlist.contains(name) {
            return Err(ToolError::NotAllowed(name.to_string()));
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
                    .map(into_wit)
                    .map_err(ToolError::Process),
            ),
            Target::Shell => (
                "shell",
                self.spec
                    .processes
                    .shell(name, request)
                    .await
                    .map(into_wit)
                    .map_err(ToolError::Process),
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
                Err(ToolError::NotATool {
                    name: name.to_string(),
                    runtime,
                }),
            ),
            Target::Missing => ("none", Err(ToolError::NotInstalled(name.to_string()))),
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
    ) -> Result<ToolOutput, ToolError> {
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
            let instance = component.pre.instantiate_async(&mut *store).await?;
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
            let instance = component.pre.instantiate_async(&mut *store).await?;
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

fn no_tools() -> String {
    ManageError::NotForTools.to_string()
}

/// The text a guest reads for a failed `manage` call.
fn said(error: super::catalog::PortError) -> String {
    ManageError::Catalog(error).to_string()
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
            Some(tools) => tools
                .invoke(&name, input, self.task.clone())
                .await
                .map_err(|e| e.to_string()),
            None => Err(ToolError::Nested(name).to_string()),
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
        let info = tools
            .artifacts
            .describe(&name, &tools.spec.policy)
            .map_err(said)?;
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
        let found = tools.artifacts.search(&query).await.map_err(said)?;
        Ok(found.into_iter().map(summary).collect())
    }

    async fn pull(
        &mut self,
        name: String,
        version: String,
    ) -> Result<manage::ArtifactSummary, String> {
        let tools = self.tools.clone().ok_or_else(no_tools)?;
        let pulled = tools
            .artifacts
            .pull(&name, &version, &*tools.core)
            .await
            .map_err(said)?;
        tracing::info!(artifact = %name, version = %version, "artifact pulled at run time");
        Ok(summary(pulled))
    }

    async fn remove(&mut self, name: String) -> Result<bool, String> {
        let tools = self.tools.clone().ok_or_else(no_tools)?;
        let removed = tools.artifacts.remove(&name).await.map_err(said)?;
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
