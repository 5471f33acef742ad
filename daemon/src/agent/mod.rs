//! Agent capsules: the host-run tool-use loop. A launch and its task loop
//! per lifecycle (`run.rs`), the turns of one task (`turns.rs`: driver call,
//! tool dispatch, token budget, continuation), compaction (`compaction.rs`),
//! the conversation per A2A context (`conversation.rs`),
//! the tools the model sees (`tools.rs`), hooks, the system prompt,
//! `MURMUR.md` and checkpoints (`context.rs`), and `trace.jsonl`. It reaches
//! guests only through [`crate::runtime`] and the database only through
//! [`crate::store`].

pub mod checkpoint;
mod compaction;
mod context;
mod conversation;
pub mod driver;
pub mod murmur_md;
mod run;
mod tools;
pub mod trace;
mod turns;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use roost_wire::artifact::ArtifactManifest;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::artifacts::SessionArtifacts;
use crate::ids::SessionId;
use crate::manifest::{AgentSpec, ConversationMode, TaskAcceptance};
use crate::policy::CapabilityPolicy;
use crate::runtime::Target;
use crate::runtime::{PreparedHook, PreparedTool, Runtime, SessionTools, ToolSpec};
use crate::store::{NewAgentTask, Store, TaskEnd};
use crate::tasks::Outcome;
use crate::tools::{ToolOutput, ToolStatus};
use checkpoint::CheckpointKey;
pub use compaction::CompactionError;
use driver::{InferenceLimits, Message, Purpose, Request, Response, ToolCall, ToolDef, Usage};
pub use run::TaskFileError;
use trace::Trace;
use turns::TurnError;

/// File an agent's task is read from, in the accessible workdir.
pub const TASK_FILE: &str = "task.md";

/// A secret that never prints.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Self {
        Self(value)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// What an agent's driver may reach: with a key from roostd's environment
/// (the operator's, bound by `inference.key_env_allow`), only the model
/// endpoint's origin, whatever else `network.allow` admits; with the
/// manifest's own key or none, the capsule's policy.
pub fn driver_policy(
    spec: &AgentSpec,
    policy: &Arc<crate::policy::CapabilityPolicy>,
) -> Arc<crate::policy::CapabilityPolicy> {
    let operators = matches!(spec.api_key, Some(crate::manifest::ApiKeySpec::Env(_)));
    if !operators {
        return Arc::clone(policy);
    }
    let origin = spec
        .endpoint
        .as_deref()
        .and_then(|e| e.parse::<http::Uri>().ok())
        .and_then(|uri| {
            let scheme = uri.scheme_str()?.to_ascii_lowercase();
            let port = uri
                .port_u16()
                .or_else(|| crate::policy::default_port(&scheme))?;
            crate::policy::NetworkRule::parse(&format!("{scheme}://{}:{port}", uri.host()?)).ok()
        });
    Arc::new(crate::policy::CapabilityPolicy {
        network_allow: origin.into_iter().collect(),
        ..(**policy).clone()
    })
}

/// An agent capsule, staged: its spec with the driver compiled and the system
/// prompt and API key resolved.
pub struct AgentPlan {
    pub spec: AgentSpec,
    pub driver: Arc<PreparedTool>,
    pub system_prompt: Option<String>,
    pub api_key: Option<Secret>,
    /// Hooks with their bindings, in `artifacts:` order.
    pub hooks: Vec<(String, Arc<PreparedHook>, ArtifactManifest)>,
}

impl AgentPlan {
    /// What the driver may reach ([`driver_policy`]).
    pub fn driver_policy(
        &self,
        policy: &Arc<crate::policy::CapabilityPolicy>,
    ) -> Arc<crate::policy::CapabilityPolicy> {
        driver_policy(&self.spec, policy)
    }

    /// `MURMUR_INFERENCE_*`: for tools and hooks the transport, model and
    /// driver name; for the driver (`for_driver`) also the endpoint, its
    /// config and the API key, which may all carry credentials (a key in a
    /// query string or a header in the config) and stay with the driver.
    pub fn inference_env(&self, for_driver: bool) -> Vec<(String, String)> {
        let spec = &self.spec;
        let mut env = vec![
            ("MURMUR_INFERENCE_TRANSPORT".into(), spec.transport.clone()),
            ("MURMUR_INFERENCE_MODEL".into(), spec.model.clone()),
            ("MURMUR_INFERENCE_DRIVER".into(), spec.driver.clone()),
        ];
        if !for_driver {
            return env;
        }
        env.push((
            "MURMUR_INFERENCE_ENDPOINT".into(),
            spec.endpoint.clone().unwrap_or_default(),
        ));
        if let Some(config) = &spec.driver_config {
            env.push(("MURMUR_INFERENCE_DRIVER_CONFIG".into(), config.clone()));
        }
        if let Some(key) = &self.api_key {
            env.push(("MURMUR_INFERENCE_API_KEY".into(), key.expose().to_string()));
        }
        env
    }

    /// `text` without the endpoint's credentials (user info, query string)
    /// or the API key: a driver's error often quotes the URL it failed on,
    /// and becomes a task's error and a trace line.
    pub fn redact(&self, text: &str) -> String {
        crate::policy::redact_secrets(
            text,
            self.spec.endpoint.as_deref(),
            self.api_key.as_ref().map(|k| k.expose()),
            self.spec.driver_config.as_deref(),
        )
    }

    fn has_compaction_hook(&self) -> bool {
        self.hooks.iter().any(|(_, _, m)| handles(m, "compaction"))
    }
}

fn handles(manifest: &ArtifactManifest, kind: &str) -> bool {
    manifest.hook.as_ref().is_some_and(|h| h.handles(kind))
}

/// How an agent session ended.
#[derive(Debug)]
pub enum AgentEnd {
    Completed,
    Failed(String),
    Stopped,
    /// Idle for `lifecycle.hibernate_after`: its inbox is parked for the
    /// launch that wakes it.
    Hibernated,
}

/// Everything one launch of an agent session uses.
pub struct AgentRun<'a> {
    pub plan: Arc<AgentPlan>,
    pub runtime: &'a Runtime,
    pub store: &'a Store,
    pub tools: Arc<SessionTools>,
    pub artifacts: Arc<SessionArtifacts>,
    pub policy: Arc<CapabilityPolicy>,
    pub allowlist: HashSet<String>,
    /// Limits and environment of tool and hook calls.
    pub tool_spec: ToolSpec,
    /// The same, plus the API key: driver calls.
    pub driver_spec: ToolSpec,
    /// `tool_spec` plus an evaluation's variables, when the start request
    /// has them (`MURMUR_EVAL_CONFIG`, …): hook calls (`None`: hooks use
    /// `tool_spec`; a waiting session keeps no second copy).
    pub hook_spec: Option<ToolSpec>,
    pub capsule: String,
    pub version: String,
    /// The session's name: its A2A route, what conversations are kept by.
    pub route: String,
    pub session_id: SessionId,
    pub url: String,
    /// What the capsule sees as `.` (where `task.md` and `checkpoints/` are).
    pub workdir: PathBuf,
    /// The session's bookkeeping dir (`trace.jsonl`, `MURMUR.md`).
    pub bookkeeping: PathBuf,
    /// `trace.jsonl` is rotated past this size (`retention.trace.max_bytes`).
    pub trace_max_bytes: u64,
    pub checkpoint_key: Option<CheckpointKey>,
    pub stop: CancellationToken,
    /// How long a session without a task waits for one (`a2a.idle_timeout_secs`).
    pub idle_timeout: Duration,
    /// Tokens and turns the session used before this launch (budgets span restarts).
    pub used_before: Usage,
    /// A2A tasks: where they are recorded and streamed.
    pub broker: Arc<crate::tasks::Broker>,
    /// The A2A task being worked on (tool calls ask its client for input).
    pub task_slot: crate::tasks::TaskSlot,
    /// Set when roostd is shutting down (queued tasks are kept for the restart).
    pub shutdown: Arc<std::sync::atomic::AtomicBool>,
    /// This launch's A2A inbox (taken when the run starts).
    pub inbox: std::sync::Mutex<Option<crate::tasks::InboxRx>>,
}

/// A driver continuation held for one context.
#[derive(Debug, Default, Clone, PartialEq)]
struct Continuation {
    held: Option<(String, String, usize)>,
}

impl Continuation {
    /// The held id and acknowledged prefix length, only within the same context.
    fn active(&self, context_id: &str) -> Option<(&str, usize)> {
        match &self.held {
            Some((id, ctx, acked)) if ctx == context_id => Some((id.as_str(), *acked)),
            _ => None,
        }
    }

    fn record(&mut self, id: String, context_id: &str, acked: usize) {
        self.held = Some((id, context_id.to_string(), acked));
    }

    fn clear(&mut self) {
        self.held = None;
    }
}

/// Session-wide counters and state shared by every task of a launch.
struct AgentState {
    trace: Trace,
    continuation: Continuation,
    total_turns: u64,
    /// The session's tokens (all tasks, all launches): what budgets count.
    used: Usage,
    /// The current task's tokens and model calls so far.
    task_used: Usage,
    task_turns: u32,
    /// The current task's context's earlier messages, and its size in
    /// tokens at their last turn (`conversation.rs`).
    history: Vec<Message>,
    history_tokens: u64,
    /// What a completed task's turns left: its messages and context size.
    finished: Option<(Vec<Message>, u64)>,
    /// A2A tasks for this session (none for `task_acceptance: none`).
    queue: crate::tasks::Queue,
}

// Awaits of phases a session does not wait in (hooks, tool calls,
// compaction, checkpoints) are boxed: an `async fn` carries the whole state
// of what it awaits inline, and a session parked on its model would keep all
// of it (BENCHMARKS.md, memory per waiting session).
pub(super) struct TaskIds<'a> {
    task_id: &'a str,
    context_id: &'a str,
}

pub(super) struct DriverCall<'a> {
    purpose: Purpose,
    model: &'a str,
    messages: &'a [Message],
    tools: &'a [ToolDef],
    continuation_id: Option<&'a str>,
    turn: u32,
}

#[cfg(test)]
mod tests;
