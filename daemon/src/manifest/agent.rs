//! The agent sections of a manifest (`inference`, `context`, `lifecycle`,
//! `trace`): their types as written and as validated into an `AgentSpec`.

use super::*;

/// `inference.api_key`: a literal, or the name of one of roostd's environment
/// variables (`{env: NAME}`) so the secret stays out of the file.
#[derive(Clone, Deserialize)]
#[serde(untagged)]
pub enum ApiKeySpec {
    Literal(String),
    Env(EnvRef),
}

/// `{env: NAME}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvRef {
    pub env: String,
}

impl std::fmt::Debug for ApiKeySpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Literal(_) => f.write_str("ApiKeySpec::Literal(<redacted>)"),
            Self::Env(r) => write!(f, "ApiKeySpec::Env({})", r.env),
        }
    }
}

/// `inference.driver`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriverRef {
    /// A `runtime: driver` entry of `artifacts:`.
    pub artifact: String,
    /// Passed to the driver as `MURMUR_INFERENCE_DRIVER_CONFIG`: a string as
    /// written, or a mapping as JSON.
    #[serde(default)]
    pub config: Option<serde_yaml::Value>,
}

/// `inference.compaction`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompactionSpec {
    /// Fraction of `context.max_tokens` past which the context is compacted.
    #[serde(default)]
    pub threshold: Option<f64>,
    /// Model that writes the summary (default: `inference.model`).
    #[serde(default)]
    pub model: Option<String>,
}

/// `inference.budget`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetSpec {
    /// Tokens in + out over the whole session; the session fails past it.
    #[serde(default)]
    pub max_total_tokens: Option<u64>,
}

/// `inference:` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawInference {
    #[serde(default)]
    transport: Option<String>,
    #[serde(default)]
    endpoint: Option<String>,
    model: String,
    #[serde(default)]
    api_key: Option<ApiKeySpec>,
    #[serde(default)]
    driver: Option<DriverRef>,
    #[serde(default)]
    system_prompt: Option<String>,
    #[serde(default)]
    system_prompt_file: Option<String>,
    #[serde(default)]
    system_prompt_artifact: Option<String>,
    #[serde(default)]
    max_turns: Option<u32>,
    #[serde(default)]
    compaction: Option<CompactionSpec>,
    #[serde(default)]
    budget: Option<BudgetSpec>,
}

/// `context:`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawContext {
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    conversation: Option<ConversationMode>,
}

/// Whether an agent's task sees the earlier tasks of its A2A context
/// (`context.conversation`; the seed's `lifecycle.conversation_mode` is its
/// alias).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConversationMode {
    /// The context's completed tasks' messages come first (kept in the
    /// store, so they outlive a restart).
    PerContext,
    /// Each task starts with its own message only.
    PerTask,
}

/// `lifecycle.same_context`: what a message on a context whose task has
/// not ended does (double-texting).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SameContext {
    /// It becomes a task that waits its turn (agents run one at a time).
    #[default]
    Queue,
    /// It is refused with an error naming the task still running.
    Reject,
    /// The unended task is canceled (said so in its status) and the new
    /// one runs.
    Interrupt,
}

/// `lifecycle.task_acceptance` and `lifecycle.after_task`: the API's types,
/// which a start request may also give.
pub use roost_wire::api::{AfterTask, TaskAcceptance};

/// `lifecycle:`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lifecycle {
    #[serde(default)]
    pub task_acceptance: TaskAcceptance,
    #[serde(default)]
    pub after_task: AfterTask,
    #[serde(default = "default_queue_depth")]
    pub queue_depth: u32,
    #[serde(default = "default_input_timeout")]
    pub input_timeout_secs: u64,
    /// How many tasks run at once (script capsules that serve A2A tasks
    /// only; an agent runs one at a time).
    #[serde(default = "default_concurrency")]
    pub concurrency: u32,
    /// The seed's name for `context.conversation` (agents only).
    #[serde(default)]
    pub conversation_mode: Option<ConversationMode>,
    /// A message on a context whose task has not ended: `queue` (default),
    /// `reject` or `interrupt`.
    #[serde(default)]
    pub same_context: SameContext,
    /// Idle this long (no task running or waiting), the session hibernates:
    /// it gives back all but its route, and its next task wakes it
    /// (`5m`, `30s`; default off).
    #[serde(default, deserialize_with = "hibernate_after")]
    pub hibernate_after: Option<std::time::Duration>,
}

/// `lifecycle.hibernate_after`: a duration from 1 s to 30 days.
fn hibernate_after<'de, D>(de: D) -> Result<Option<std::time::Duration>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    use serde::de::Error;
    let Some(text) = Option::<String>::deserialize(de)? else {
        return Ok(None);
    };
    let after = humantime::parse_duration(text.trim()).map_err(|e| {
        D::Error::custom(format!(
            "hibernate_after '{text}' is not a duration ({e}); write e.g. 5m, 90s or 1h"
        ))
    })?;
    if after < std::time::Duration::from_secs(1)
        || after > std::time::Duration::from_secs(30 * 86_400)
    {
        return Err(D::Error::custom(format!(
            "hibernate_after '{text}' must be from 1s to 30d"
        )));
    }
    Ok(Some(after))
}

impl SameContext {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queue => "queue",
            Self::Reject => "reject",
            Self::Interrupt => "interrupt",
        }
    }

    /// As [`Self::as_str`] wrote it; anything else is `queue`.
    pub fn parse(text: &str) -> Self {
        match text {
            "reject" => Self::Reject,
            "interrupt" => Self::Interrupt,
            _ => Self::Queue,
        }
    }
}

/// The lifecycle's rules, decided here only.
impl Lifecycle {
    /// Waits for tasks until stopped (`queue` + `sleep`); any other session
    /// with no task to work on ends after the idle timeout.
    pub fn waits_forever(&self) -> bool {
        self.task_acceptance == TaskAcceptance::Queue && self.after_task == AfterTask::Sleep
    }

    /// The session ends after a task (`single`, or `after_task: exit`); its
    /// tasks run one at a time and a failed one fails the session.
    pub fn ends_after_task(&self) -> bool {
        self.task_acceptance == TaskAcceptance::Single || self.after_task == AfterTask::Exit
    }

    /// `hibernate_after` needs a session that waits for tasks.
    pub(super) fn check_hibernation(&self) -> Result<(), (&'static str, String)> {
        if self.hibernate_after.is_some() && !self.waits_forever() {
            return Err((
                "lifecycle.hibernate_after",
                "applies to a session that waits for tasks (task_acceptance: queue and \
                 after_task: sleep); set those, or remove hibernate_after"
                    .into(),
            ));
        }
        Ok(())
    }

    /// How long idle before it hibernates: only a session that waits for
    /// tasks ([`Self::waits_forever`]) hibernates; others end when idle.
    pub fn hibernates(&self) -> Option<std::time::Duration> {
        self.hibernate_after.filter(|_| self.waits_forever())
    }

    /// This lifecycle with a start request's overrides.
    pub fn overridden(&self, request: &roost_wire::api::StartRequest) -> Self {
        let mut l = self.clone();
        if let Some(acceptance) = request.lifecycle {
            l.task_acceptance = acceptance;
        }
        if let Some(after) = request.after_task {
            l.after_task = after;
        }
        l
    }

    /// How many A2A tasks may wait for the session; `None`: it takes none.
    pub fn inbox_depth(&self) -> Option<usize> {
        match self.task_acceptance {
            TaskAcceptance::None => None,
            TaskAcceptance::Single => Some(1),
            TaskAcceptance::Queue => Some(self.queue_depth as usize),
        }
    }
}

impl Default for Lifecycle {
    fn default() -> Self {
        Self {
            task_acceptance: TaskAcceptance::default(),
            after_task: AfterTask::default(),
            queue_depth: default_queue_depth(),
            input_timeout_secs: default_input_timeout(),
            concurrency: default_concurrency(),
            conversation_mode: None,
            same_context: SameContext::default(),
            hibernate_after: None,
        }
    }
}

pub(super) fn default_queue_depth() -> u32 {
    8
}

pub(super) fn default_concurrency() -> u32 {
    1
}

pub(super) fn default_input_timeout() -> u64 {
    300
}

/// `trace:`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceSpec {
    #[serde(default)]
    pub include_tool_output: bool,
}

/// Where an agent's system prompt comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum SystemPrompt {
    None,
    Inline(String),
    /// Absolute path (resolved against the manifest dir), read at stage time.
    File(PathBuf),
    /// A skill artifact whose `skill.md` is the prompt.
    Artifact(String),
}

/// A validated agent capsule: everything the host-run loop needs.
#[derive(Debug, Clone)]
pub struct AgentSpec {
    pub transport: String,
    pub endpoint: Option<String>,
    pub model: String,
    pub api_key: Option<ApiKeySpec>,
    pub driver: String,
    /// `MURMUR_INFERENCE_DRIVER_CONFIG`.
    pub driver_config: Option<String>,
    pub system_prompt: SystemPrompt,
    pub max_turns: u32,
    pub compaction_threshold: f64,
    pub compaction_model: Option<String>,
    pub max_total_tokens: Option<u64>,
    /// `context.max_tokens` (0: unknown, no compaction).
    pub context_tokens: u64,
    /// `context.conversation` as written (see [`AgentSpec::conversation`]).
    pub conversation: Option<ConversationMode>,
    pub lifecycle: Lifecycle,
    pub trace: TraceSpec,
}

impl AgentSpec {
    /// Whether a task sees its context's earlier tasks: as written, else
    /// `per_context` for `queue` sessions (which take task after task) and
    /// `per_task` for the others.
    pub fn conversation(&self) -> ConversationMode {
        self.conversation
            .unwrap_or(match self.lifecycle.task_acceptance {
                TaskAcceptance::Queue => ConversationMode::PerContext,
                TaskAcceptance::None | TaskAcceptance::Single => ConversationMode::PerTask,
            })
    }
}

/// Default `inference.max_turns`.
pub const DEFAULT_MAX_TURNS: u32 = 20;
/// Default `inference.compaction.threshold`.
pub const DEFAULT_COMPACTION_THRESHOLD: f64 = 0.98;

/// The agent sections of a manifest, as written.
pub(super) struct AgentSections {
    pub(super) inference: RawInference,
    pub(super) context: RawContext,
    pub(super) lifecycle: Lifecycle,
    pub(super) trace: TraceSpec,
}

/// Validates an agent capsule's sections; errors name the field to fix.
pub(super) fn agent_spec(
    s: AgentSections,
    artifacts: &[ArtifactRef],
    policy: &CapabilityPolicy,
    manifest_dir: &Path,
) -> Result<AgentSpec, (&'static str, String)> {
    let inf = s.inference;
    let transport = inf.transport.unwrap_or_else(|| "http".into());
    if transport != "http" {
        return Err((
            "inference.transport",
            format!("'{transport}' is not supported; use http (drivers speak wasi:http)"),
        ));
    }
    if inf.model.trim().is_empty() {
        return Err(("inference.model", "must not be empty".into()));
    }
    let endpoint = inf.endpoint.as_deref().ok_or((
        "inference.endpoint",
        "is required: the model server's base URL, e.g. http://127.0.0.1:11434/v1".to_string(),
    ))?;
    check_endpoint(endpoint, policy).map_err(|e| ("inference.endpoint", e.to_string()))?;
    if let Some(ApiKeySpec::Env(EnvRef { env })) = &inf.api_key
        && (env.is_empty() || env.contains('='))
    {
        return Err((
            "inference.api_key",
            "`env` must name an environment variable of roostd".into(),
        ));
    }
    let driver = inf.driver.ok_or((
        "inference.driver",
        "is required: name the driver artifact, e.g. driver: {artifact: openai-driver}, and \
         list it under `artifacts:` with runtime: driver"
            .to_string(),
    ))?;
    declared(artifacts, &driver.artifact, ArtifactRuntime::Driver)
        .map_err(|e| ("inference.driver.artifact", e.to_string()))?;
    let driver_config = match driver.config {
        None | Some(serde_yaml::Value::Null) => None,
        Some(serde_yaml::Value::String(text)) => Some(text),
        Some(value) => Some(
            serde_json::to_string(&value)
                .map_err(|e| ("inference.driver.config", format!("cannot be JSON: {e}")))?,
        ),
    };
    let prompts = [
        inf.system_prompt.is_some(),
        inf.system_prompt_file.is_some(),
        inf.system_prompt_artifact.is_some(),
    ];
    if prompts.iter().filter(|p| **p).count() > 1 {
        return Err((
            "inference.system_prompt",
            "give one of system_prompt, system_prompt_file and system_prompt_artifact".into(),
        ));
    }
    let system_prompt = if let Some(text) = inf.system_prompt {
        SystemPrompt::Inline(text)
    } else if let Some(file) = inf.system_prompt_file {
        let field = "inference.system_prompt_file";
        let path = super::paths::inside(manifest_dir, &file).map_err(|e| (field, e.to_string()))?;
        super::paths::open(manifest_dir, &path).map_err(|e| (field, e.to_string()))?;
        SystemPrompt::File(path)
    } else if let Some(name) = inf.system_prompt_artifact {
        declared(artifacts, &name, ArtifactRuntime::Skill)
            .map_err(|e| ("inference.system_prompt_artifact", e.to_string()))?;
        SystemPrompt::Artifact(name)
    } else {
        SystemPrompt::None
    };
    let max_turns = inf.max_turns.unwrap_or(DEFAULT_MAX_TURNS);
    if max_turns == 0 {
        return Err(("inference.max_turns", "must be at least 1".into()));
    }
    let compaction = inf.compaction.unwrap_or_default();
    let threshold = compaction.threshold.unwrap_or(DEFAULT_COMPACTION_THRESHOLD);
    if !(threshold > 0.0 && threshold <= 1.0) {
        return Err((
            "inference.compaction.threshold",
            format!("{threshold} must be greater than 0 and at most 1"),
        ));
    }
    let max_total_tokens = inf.budget.and_then(|b| b.max_total_tokens);
    if max_total_tokens == Some(0) {
        return Err((
            "inference.budget.max_total_tokens",
            "must be at least 1".into(),
        ));
    }
    if s.lifecycle.concurrency != 1 {
        return Err((
            "lifecycle.concurrency",
            "an agent runs one task at a time (its context carries over); remove it".into(),
        ));
    }
    if s.lifecycle.queue_depth == 0 {
        return Err(("lifecycle.queue_depth", "must be at least 1".into()));
    }
    s.lifecycle.check_hibernation()?;
    let conversation = match (s.context.conversation, s.lifecycle.conversation_mode) {
        (Some(a), Some(b)) if a != b => {
            return Err((
                "context.conversation",
                "and lifecycle.conversation_mode (its older name) disagree; keep one".into(),
            ));
        }
        (a, b) => a.or(b),
    };
    Ok(AgentSpec {
        transport,
        endpoint: inf.endpoint,
        model: inf.model,
        api_key: inf.api_key,
        driver: driver.artifact,
        driver_config,
        system_prompt,
        max_turns,
        compaction_threshold: threshold,
        compaction_model: compaction.model,
        max_total_tokens,
        context_tokens: s.context.max_tokens.unwrap_or(0),
        conversation,
        lifecycle: s.lifecycle,
        trace: s.trace,
    })
}

/// Why an agent's reference to an artifact is refused.
#[derive(Debug, thiserror::Error)]
pub enum DeclaredError {
    #[error("'{name}' is listed under `artifacts:` as a {listed}, but must be a {wanted}")]
    WrongRuntime {
        name: String,
        listed: ArtifactRuntime,
        wanted: ArtifactRuntime,
    },
    #[error(
        "'{name}' is not listed under `artifacts:`; add {{name: {name}, version: …, runtime: \
         {wanted}}}"
    )]
    Missing {
        name: String,
        wanted: ArtifactRuntime,
    },
}

/// `name` must be listed under `artifacts:` with `runtime`.
pub(super) fn declared(
    artifacts: &[ArtifactRef],
    name: &str,
    runtime: ArtifactRuntime,
) -> Result<(), DeclaredError> {
    match artifacts.iter().find(|a| a.name == name) {
        Some(a) if a.runtime == runtime => Ok(()),
        Some(a) => Err(DeclaredError::WrongRuntime {
            name: name.to_string(),
            listed: a.runtime,
            wanted: runtime,
        }),
        None => Err(DeclaredError::Missing {
            name: name.to_string(),
            wanted: runtime,
        }),
    }
}

/// Why `inference.endpoint` is refused.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error("'{endpoint}' is not a URL: {reason}")]
    NotUrl { endpoint: String, reason: String },
    #[error("'{0}' must start with http:// or https://")]
    NotHttp(String),
    #[error("'{0}' has no host")]
    NoHost(String),
    #[error(
        "'{endpoint}' is not allowed by capabilities.network.allow, so the driver could not \
         reach it; add \"{allow}\" to network.allow"
    )]
    NotAllowed { endpoint: String, allow: String },
}

/// The endpoint must be an http(s) URL the capsule's network policy allows
/// (the driver reaches it through wasi:http, which enforces the same rules).
pub(super) fn check_endpoint(
    endpoint: &str,
    policy: &CapabilityPolicy,
) -> Result<(), EndpointError> {
    let uri: http::Uri =
        endpoint
            .parse()
            .map_err(|e: http::uri::InvalidUri| EndpointError::NotUrl {
                endpoint: endpoint.to_string(),
                reason: e.to_string(),
            })?;
    let scheme = uri.scheme_str().unwrap_or("").to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return Err(EndpointError::NotHttp(endpoint.to_string()));
    }
    let host = uri
        .host()
        .ok_or_else(|| EndpointError::NoHost(endpoint.to_string()))?;
    let port = uri
        .port_u16()
        .or_else(|| crate::policy::default_port(&scheme))
        .unwrap_or(0);
    if !policy.allows_url(&scheme, host, port) {
        return Err(EndpointError::NotAllowed {
            endpoint: endpoint.to_string(),
            allow: format!("{scheme}://{host}:{port}"),
        });
    }
    Ok(())
}
