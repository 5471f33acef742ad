//! The control API's wire types: the one definition shared by roostd (server) and roostctl (client).

use serde::{Deserialize, Serialize};

mod cluster;
mod schedules;
mod upgrade;
pub use cluster::{
    ClusterNode, ClusterSession, ClusterSessionList, ClusterStatus, DrainReport, DrainRequest,
    DrainedSession,
};
pub use schedules::{Missed, Overlap, ScheduleInfo, ScheduleList, ScheduleRequest, ScheduleTimes};
pub use upgrade::{SessionVersion, SessionVersions, UpgradeRequest};

/// API version prefix every control endpoint lives under.
pub const API_PREFIX: &str = "/v1";

/// What a session does when its capsule ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum RestartPolicy {
    /// Never restart (the default).
    #[default]
    No,
    /// Restart after a failure or an interruption.
    OnFailure,
    /// Restart whenever the capsule ends, unless it was stopped by an operator.
    Always,
}

impl RestartPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::No => "no",
            Self::OnFailure => "on-failure",
            Self::Always => "always",
        }
    }
}

impl std::str::FromStr for RestartPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "no" => Ok(Self::No),
            "on-failure" => Ok(Self::OnFailure),
            "always" => Ok(Self::Always),
            other => Err(format!(
                "unknown restart policy '{other}': use one of no, on-failure, always"
            )),
        }
    }
}

/// Whether and how a session takes tasks (`lifecycle.task_acceptance` of
/// a manifest, or `roostctl start --lifecycle`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskAcceptance {
    /// Runs a pre-seeded `task.md` if there is one; takes no A2A tasks.
    None,
    /// One task (`task.md`, or the first A2A task), then the session ends.
    #[default]
    Single,
    /// Task after task, up to `queue_depth` waiting.
    Queue,
}

impl std::str::FromStr for TaskAcceptance {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Self::None),
            "single" => Ok(Self::Single),
            "queue" => Ok(Self::Queue),
            other => Err(format!(
                "unknown lifecycle '{other}': use one of none, single, queue"
            )),
        }
    }
}

/// What a `queue` session does after a task (`lifecycle.after_task`, or
/// `roostctl start --after-task`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AfterTask {
    /// The session ends.
    #[default]
    Exit,
    /// It waits for the next task until stopped.
    Sleep,
}

impl std::str::FromStr for AfterTask {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "exit" => Ok(Self::Exit),
            "sleep" => Ok(Self::Sleep),
            other => Err(format!("unknown after-task '{other}': use exit or sleep")),
        }
    }
}

/// Where a session is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionState {
    /// Accepted; staging, or waiting out a restart backoff.
    Starting,
    /// The guest is executing.
    Running,
    /// The guest returned normally.
    Completed,
    /// The guest trapped, hit a limit, or could not be staged; `error` says why.
    Failed,
    /// Stopped by an operator or by a daemon shutdown.
    Stopped,
    /// The daemon died while the session was live.
    Interrupted,
    /// Idle for its `lifecycle.hibernate_after`: nothing of it runs or is
    /// held but its route; its next task wakes it.
    Hibernated,
}

impl SessionState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Stopped => "stopped",
            Self::Interrupted => "interrupted",
            Self::Hibernated => "hibernated",
        }
    }

    /// Whether the session has ended (no guest will run unless it is started again).
    pub fn is_ended(self) -> bool {
        !matches!(self, Self::Starting | Self::Running | Self::Hibernated)
    }
}

impl std::str::FromStr for SessionState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "starting" => Self::Starting,
            "running" => Self::Running,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "stopped" => Self::Stopped,
            "interrupted" => Self::Interrupted,
            "hibernated" => Self::Hibernated,
            other => return Err(format!("unknown session state '{other}'")),
        })
    }
}

impl std::fmt::Display for SessionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `POST /v1/sessions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// Absolute path of a capsule directory or of its `murmur.yaml`.
    pub path: String,
    /// Route name; defaults to the capsule name when no live session has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Absolute path of an existing directory the capsule sees as its workdir.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    #[serde(default)]
    pub restart: RestartPolicy,
    /// Text written to `task.md` in the workdir before the capsule starts
    /// (agent capsules run it as their first task).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// `lifecycle.task_acceptance` for this session, over the manifest's
    /// (capsules that take A2A tasks: agents and A2A handlers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<TaskAcceptance>,
    /// `lifecycle.after_task` for this session, over the manifest's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_task: Option<AfterTask>,
    /// `MURMUR_JOB_ID` in the capsule's, its tools' and its hooks'
    /// environment (the job this session is part of).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// For an agent's hooks only: `MURMUR_EVAL_CONFIG` (an evaluation's
    /// configuration, JSON), `MURMUR_CASE_ID` and `MURMUR_DATASET_ID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_config: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub case_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset_id: Option<String>,
    /// In a cluster: the node to start it on (`auto`, and unset: the live
    /// node with the most free capacity, a tie going to the node asked; a
    /// capsule uploaded to the node asked starts there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// In a cluster: only a node with all these labels (`cluster.labels`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub node_labels: std::collections::BTreeMap<String, String>,
}

/// One session as the API reports it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Session {
    pub id: String,
    pub name: String,
    pub capsule: String,
    pub version: String,
    pub state: SessionState,
    /// Why the session failed, was interrupted, or stopped restarting.
    pub error: Option<String>,
    /// The directory the capsule sees as `.`.
    pub workdir: String,
    /// Where roostd keeps this session's logs and bookkeeping.
    pub bookkeeping_dir: String,
    /// Absolute path of the capsule's `murmur.yaml`.
    pub manifest: String,
    pub restart_policy: RestartPolicy,
    /// How many times supervision restarted the capsule.
    pub restart_count: u32,
    /// RFC 3339 timestamps (UTC).
    pub created_at: String,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    pub updated_at: String,
    /// The artifacts installed for the session (declared, local and pulled).
    #[serde(default)]
    pub artifacts: Vec<ArtifactRecord>,
    /// What the tool jail enforces for this session on this host.
    #[serde(default)]
    pub sandbox: String,
    /// Model tokens and turns used by an agent session (all tasks, all runs).
    #[serde(default)]
    pub usage: SessionUsage,
}

/// Token use of an agent session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Model calls of the tool-use loop.
    pub turns: u64,
}

/// One task of an agent session (`GET /v1/sessions/{id}/tasks`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRecord {
    pub id: String,
    pub context_id: String,
    /// `task_md` (a pre-seeded task.md) or `a2a`.
    pub source: String,
    /// `working`, `completed`, `failed` or `canceled`.
    pub state: String,
    pub input_bytes: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub turns: u32,
    pub error: Option<String>,
    pub created_at: String,
    pub ended_at: Option<String>,
}

/// One installed artifact of a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactRecord {
    pub name: String,
    pub version: String,
    /// `tool`, `driver`, `hook` or `skill`.
    pub runtime: String,
    /// `wasm` or `native`, for tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implementation: Option<String>,
    /// sha256 of the bundle (absent for local skills).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// `registry` (declared in murmur.yaml), `local` (a skill's `source:`) or
    /// `pulled` (through the artifact manager at run time).
    pub origin: String,
}

/// `POST /v1/policy`: the capsule whose effective policy to report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyRequest {
    /// Absolute path of the capsule dir or its `murmur.yaml`.
    pub path: String,
}

/// The policy a capsule would run under on this host, before it runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PolicyReport {
    pub capsule: String,
    pub version: String,
    pub manifest: String,
    /// `tools:`: the names `invoke` dispatches.
    pub tools: Vec<String>,
    /// `name@version (runtime)` of each declared artifact.
    pub artifacts: Vec<String>,
    /// Outgoing HTTP for guests (deny by default).
    pub network_allow: Vec<String>,
    /// TCP ports native and shell tools may connect to (`None`: any).
    pub tool_tcp_ports: Option<Vec<u16>>,
    /// Whether tools may use UDP (only with a DNS port or any port allowed).
    pub tool_udp: bool,
    /// Whether tools may open Unix sockets (`network.unix_sockets`).
    #[serde(default)]
    pub tool_unix_sockets: bool,
    pub read_only: Vec<String>,
    pub read_write: Vec<String>,
    /// What roostd reads of the capsule directory for it (each inside it,
    /// no link followed).
    #[serde(default)]
    pub capsule_files: Vec<String>,
    pub shell_allow: Vec<String>,
    pub shell_strip_env: Vec<String>,
    pub env_allow: Vec<String>,
    /// Effective limits (the daemon's defaults where the manifest names none).
    pub limits: PolicyLimits,
    /// What enforces it here: guests, and native/shell tools.
    pub guests: String,
    pub native_tools: String,
    /// Set when roostd would refuse to start it on this host.
    pub refused: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PolicyLimits {
    pub timeout_secs: u64,
    pub memory_mb: u64,
    pub tool_cpu_secs: u64,
    pub tool_processes: u64,
    pub tool_open_files: u64,
    /// Largest file a tool (RLIMIT_FSIZE) or a WASM guest may write.
    pub tool_output_bytes: u64,
}

/// `GET /v1/sessions`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionList {
    pub sessions: Vec<Session>,
}

/// `POST /v1/prune`: delete ended sessions (with their rows and
/// directories) and ended A2A tasks that ended more than `older_than_secs`
/// ago (0: all ended ones).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PruneRequest {
    #[serde(default)]
    pub older_than_secs: u64,
    /// Only report what would be deleted.
    #[serde(default)]
    pub dry_run: bool,
}

/// What `POST /v1/prune` (or retention) deleted, or would delete.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PruneReport {
    /// The sessions deleted (their records as they were).
    pub sessions: Vec<Session>,
    /// How many ended A2A tasks were deleted.
    pub tasks: u64,
    pub dry_run: bool,
}

/// Sessions being brought back after a restart, in the background.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeProgress {
    /// Sessions to bring back.
    pub total: u64,
    /// Of them, tried so far (resumed or failed).
    pub done: u64,
}

/// `GET /v1/health`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Health {
    pub status: String,
    pub version: String,
    pub pid: u32,
    pub uptime_secs: u64,
    pub live_sessions: u64,
    /// The A2A gateway's bound address (`host:port`).
    pub a2a_addr: String,
    /// The TCP control listener's address, when one is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_addr: Option<String>,
    pub state_dir: String,
    /// What the tool jail enforces for a capsule with native or shell tools
    /// on this host (`full`, `partial: missing …`, `none: missing …`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_jail: Option<String>,
    /// Whether the A2A gateway requires a bearer token (`a2a.token_file`).
    #[serde(default)]
    pub a2a_token: bool,
    /// The jail helper roostd runs tools through, when it found one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jail_helper: Option<String>,
    /// Resuming sessions after a restart (absent once every one was tried).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resuming: Option<ResumeProgress>,
    /// The cluster this roostd is a node of (`cluster:`); absent on one host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterStatus>,
}

/// Every error response: `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// Stable machine-readable code, e.g. `not_found`, `invalid_manifest`.
    pub code: String,
    /// What was wrong and what to do about it.
    pub message: String,
}

/// `GET /v1/sessions/{id}/logs?…`: which of a session's guest output, and how.
/// With none of `tail`, `since_ms`, `timestamps` and `json` the output is
/// passed through as the guest wrote it; with any of them it comes as whole
/// lines (text, or [`LogLine`]s as JSON lines).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogsQuery {
    /// Keep streaming new output until the session ends.
    #[serde(default)]
    pub follow: bool,
    /// Only the last N lines (of what was written before the request).
    #[serde(default)]
    pub tail: Option<u64>,
    /// Only lines written at or after this time (Unix milliseconds).
    #[serde(default)]
    pub since_ms: Option<u64>,
    /// Prefix each text line with its time (RFC 3339, UTC, milliseconds).
    #[serde(default)]
    pub timestamps: bool,
    /// JSON lines ([`LogLine`]) instead of text.
    #[serde(default)]
    pub json: bool,
}

impl LogsQuery {
    /// Whether the answer comes as whole lines rather than the raw bytes.
    pub fn by_line(&self) -> bool {
        self.tail.is_some() || self.since_ms.is_some() || self.timestamps || self.json
    }

    /// The query string (without `?`).
    pub fn to_query(&self) -> String {
        let mut q = format!("follow={}", self.follow);
        if let Some(tail) = self.tail {
            q.push_str(&format!("&tail={tail}"));
        }
        if let Some(since) = self.since_ms {
            q.push_str(&format!("&since_ms={since}"));
        }
        if self.timestamps {
            q.push_str("&timestamps=true");
        }
        if self.json {
            q.push_str("&json=true");
        }
        q
    }
}

/// One line of guest output, as `logs --json` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// When the line's first byte was written (RFC 3339, UTC, milliseconds).
    pub time: String,
    /// `stdout` or `stderr` (of the guest, or of a tool it ran).
    pub stream: String,
    /// The line without its newline (invalid UTF-8 replaced).
    pub line: String,
}

/// One session state change, as `GET /v1/events` streams it (a JSON line each).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionEvent {
    /// Increasing across the daemon: the order changes happened in.
    pub seq: i64,
    /// RFC 3339, UTC.
    pub at: String,
    pub session_id: String,
    pub name: String,
    pub capsule: String,
    pub state: SessionState,
    /// Why: the error of a failed or interrupted session, a stop's reason.
    pub detail: Option<String>,
}

/// What `POST /v1/registry` (`roostctl publish --to-daemon`) published.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishReport {
    pub name: String,
    pub version: String,
    pub runtime: String,
    /// `any`, or `<os>-<arch>`.
    pub platform: String,
    /// The bundle's path in the registry (on the daemon's host).
    pub path: String,
    pub sha256: String,
    pub size: u64,
    /// The registry already held these exact bytes.
    pub unchanged: bool,
    /// What the payload is (`WASM component`, `native executable`…).
    pub kind: String,
}

/// What `POST /v1/uploads` (a capsule directory roostd cannot read,
/// uploaded by `roostctl start`) made of the upload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadReport {
    /// The uploaded capsule's `murmur.yaml` on the daemon's host: the path
    /// to start it from.
    pub path: String,
    /// sha256 of the zip (the upload's directory name).
    pub sha256: String,
    pub files: u64,
    pub bytes: u64,
}

/// One JSON line of `POST /v1/sessions?progress=true`: each staging step
/// as it starts, then the session or the error (the body the plain request
/// would have answered, with its status).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StartProgress {
    /// `read` (the manifest), `compile` (the component), and per artifact
    /// `fetch`, `verify`, `compile`; `what` names the file or `name@version`.
    Step {
        step: String,
        what: String,
    },
    Session(Box<Session>),
    Error {
        status: u16,
        error: ErrorDetail,
    },
}
