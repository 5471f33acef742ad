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
use super::catalog::{Catalog, Summary, Target};
use super::catalog::{Processes, ToolOutput, ToolRequest, ToolStatus};
use super::{Core, PreparedComponent, PreparedHook, PreparedTool, SessionState, StoreSpec};
use crate::logs::{LogSink, Stream};
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

impl murmur::tool_registry::invoke::Host for SessionState {
    async fn invoke(&mut self, name: String, input: ToolInput) -> Result<ToolResult, String> {
        match self.tools.clone() {
            Some(tools) => tools.invoke(&name, input, self.task.clone()).await,
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

impl murmur::a2a::io::Host for SessionState {
    async fn emit_artifact(
        &mut self,
        artifact_id: String,
        part: murmur::a2a::io::Part,
        append: bool,
        last_chunk: bool,
    ) {
        use murmur::a2a::io::Part;
        let Some(task) = &self.task else {
            return;
        };
        let file = |kind: &str, value: String, name: Option<String>, media: Option<String>| {
            let mut p = serde_json::json!({ kind: value });
            if let Some(name) = name {
                p["filename"] = name.into();
            }
            if let Some(media) = media {
                p["mediaType"] = media.into();
            }
            p
        };
        let (text, part) = match part {
            Part::Text(text) => (text, None),
            Part::Data(json) => match serde_json::from_str::<serde_json::Value>(&json) {
                Ok(value) => (String::new(), Some(serde_json::json!({ "data": value }))),
                Err(_) => (json, None),
            },
            Part::Raw(f) => {
                let bytes = base64_encode(&f.bytes);
                (
                    String::new(),
                    Some(file("raw", bytes, f.filename, f.media_type)),
                )
            }
            Part::Url(f) => (
                String::new(),
                Some(file("url", f.url, f.filename, f.media_type)),
            ),
        };
        task.artifact(super::ArtifactUpdate {
            artifact_id,
            text,
            append,
            last_chunk,
            part,
        })
        .await;
    }

    async fn request_input(&mut self, prompt: String) -> wasmtime::Result<murmur::a2a::io::Reply> {
        let reply = self.ask(&prompt).await?;
        Ok(murmur::a2a::io::Reply {
            message_id: reply.message_id,
            text: reply.text,
        })
    }
}

/// Standard base64 with padding (A2A's `raw` parts).
fn base64_encode(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

impl SessionState {
    /// Asks the current task's client for input; the wait is not the guest's time.
    async fn ask(&mut self, prompt: &str) -> wasmtime::Result<super::Reply> {
        let Some(link) = self.task.clone() else {
            return Err(wasmtime::format_err!(
                "request-input: this call is not handling an A2A task, so there is no peer to ask"
            ));
        };
        tracing::info!(task_id = %link.task_id(), "guest asks its A2A client for input");
        let started = Instant::now();
        self.waited.begin();
        let answer = link.request_input(prompt).await;
        let waited = started.elapsed();
        self.guard.extend(waited);
        self.waited.end(waited);
        answer.map_err(|e| wasmtime::format_err!("{e}"))
    }
}

impl murmur::message::send::Host for SessionState {
    async fn send(
        &mut self,
        peer_url: String,
        message: murmur::message::send::Message,
    ) -> Result<murmur::message::send::TaskResult, String> {
        let uri: http::Uri = peer_url
            .parse()
            .map_err(|_| format!("'{peer_url}' is not a URL; give the peer's A2A base URL"))?;
        if !self.hooks.allowed(&uri) {
            let target = crate::policy::redact_url(&peer_url);
            tracing::warn!(session_id = %self.hooks.session_id, peer = %target,
                "A2A send denied: not in capabilities.network.allow");
            self.hooks.denied(&target);
            return Err(format!(
                "network policy: '{peer_url}' is not in capabilities.network.allow"
            ));
        }
        let outbox = self
            .outbox
            .clone()
            .ok_or("this daemon has no A2A gateway to send through")?;
        let traceparent = traceparent(self.task.as_ref(), &self.hooks.session_id);
        let sent = outbox
            .send(
                &peer_url,
                super::OutMessage {
                    message_id: message.message_id.clone(),
                    context_id: message.context_id,
                    text: message.text,
                    traceparent: traceparent.clone(),
                },
            )
            .await?;
        tracing::info!(session_id = %self.hooks.session_id, peer = %peer_url,
            task_id = %sent.task_id, %traceparent, "A2A message sent");
        if let Some(notes) = &self.hooks.notes {
            notes.push(super::Note {
                event: "a2a_send",
                fields: serde_json::json!({
                    "peer": peer_url, "message_id": message.message_id,
                    "peer_task_id": sent.task_id, "peer_context_id": sent.context_id,
                    "state": sent.state, "traceparent": traceparent,
                }),
            });
        }
        Ok(murmur::message::send::TaskResult {
            task_id: sent.task_id,
            context_id: sent.context_id,
            state: sent.state,
        })
    }
}

/// A W3C `traceparent` for an outgoing call: the current task's trace (the
/// one its client sent, else one named after the task), or the session's,
/// with a fresh span id.
fn traceparent(task: Option<&Arc<dyn super::TaskIo>>, session_id: &str) -> String {
    let trace_id = task
        .map(|t| t.trace_id())
        .unwrap_or_else(|| super::trace_id_of(session_id));
    // The last 16 hex digits of a v7 uuid are random.
    let span = uuid::Uuid::now_v7().simple().to_string();
    format!("00-{trace_id}-{}-01", &span[16..])
}

impl murmur::text::chunks::Host for SessionState {
    async fn emit_chunk(&mut self, chunk: String) {
        self.log.write(Stream::Stdout, chunk.as_bytes());
        if let Some(task) = &self.task {
            task.chunk(&chunk, false).await;
        }
    }

    async fn emit_thinking_chunk(&mut self, chunk: String) {
        self.log.write(Stream::Stdout, chunk.as_bytes());
        if let Some(task) = &self.task {
            task.chunk(&chunk, true).await;
        }
    }
}

impl murmur::task::task::Host for SessionState {
    async fn request_input(&mut self, prompt: String) -> wasmtime::Result<String> {
        Ok(self.ask(&prompt).await?.text)
    }
}
