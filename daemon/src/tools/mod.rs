//! Native and shell tools: the processes a capsule's `invoke` may start, with a
//! cleared environment, a synthetic `HOME`, their own process group, a deadline,
//! and bounded output. (The Landlock/seccomp jail is a separate layer.)

pub mod native;
pub mod origin;
pub mod shell;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::ids::SessionId;
use crate::policy::{CapabilityPolicy, is_credential_name};

/// Host variables a tool keeps (when set and not credential-shaped).
const BASELINE_ENV: [&str; 6] = ["PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM"];
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// Directory under the workdir that tools get as `HOME`.
pub const CAPSULE_HOME: &str = ".capsule-home";

use crate::runtime::PortError;
pub use crate::runtime::{ToolOutput, ToolRequest, ToolStatus};

/// Where and under which limits a tool process runs.
#[derive(Clone)]
pub struct ProcessContext {
    pub name: String,
    /// The session whose tool this is (the control socket refuses its tools).
    pub session_id: SessionId,
    /// The capsule's accessible workdir: the process's cwd.
    pub workdir: PathBuf,
    /// Bookkeeping dir (full shell output goes under it).
    pub bookkeeping: PathBuf,
    /// What `tool-output/` may hold (`retention.tool_output.max_bytes`; 0:
    /// no bound): the oldest outputs are removed past it.
    pub tool_output_max_bytes: u64,
    /// The capsule's guest environment (allow-listed + identity variables).
    pub env: Vec<(String, String)>,
    pub policy: Arc<CapabilityPolicy>,
    pub timeout: Duration,
    pub stop: CancellationToken,
    /// The roostd binary that sets up the jail before exec; `None` runs tools
    /// unjailed (operator setting `sandbox.jail_tools: false`).
    pub jail_helper: Option<PathBuf>,
    /// Where each jailed call gets its own pids cgroup (`limits.processes`).
    pub pids: Option<std::sync::Arc<crate::sandbox::cgroup::PidsCgroups>>,
    /// The unprivileged uid a jailed tool runs as (roostd runs as root).
    pub identity: Option<crate::sandbox::identity::Identity>,
    pub memory_bytes: u64,
}

/// A session's native and shell tools, as the runtime's host interfaces run
/// them: every call gets `base` with its tool's name.
pub struct SessionProcesses {
    base: ProcessContext,
}

impl SessionProcesses {
    /// `base.name` is replaced per call.
    pub fn new(base: ProcessContext) -> Self {
        Self { base }
    }

    /// Tools of a session in `workdir` run without the jail (benchmarks and
    /// tests of what is around them).
    pub fn unjailed(workdir: &Path, policy: Arc<CapabilityPolicy>, timeout: Duration) -> Self {
        Self::new(ProcessContext {
            name: String::new(),
            session_id: SessionId::from(""),
            workdir: workdir.to_path_buf(),
            bookkeeping: workdir.to_path_buf(),
            tool_output_max_bytes: 0,
            env: Vec::new(),
            policy,
            timeout,
            stop: CancellationToken::new(),
            jail_helper: None,
            pids: None,
            identity: None,
            memory_bytes: 128 << 20,
        })
    }

    fn context(&self, name: &str) -> ProcessContext {
        ProcessContext {
            name: name.to_string(),
            ..self.base.clone()
        }
    }
}

#[async_trait::async_trait]
impl crate::runtime::Processes for SessionProcesses {
    async fn native(
        &self,
        name: &str,
        binary: &Path,
        request: ToolRequest,
    ) -> Result<ToolOutput, PortError> {
        Ok(native::run(binary, request, &self.context(name)).await?)
    }

    async fn shell(&self, name: &str, request: ToolRequest) -> Result<ToolOutput, PortError> {
        Ok(shell::run(request, &self.context(name)).await?)
    }
}

/// The environment of a tool process: a safe baseline from the daemon's own,
/// the capsule's guest environment, a synthetic `HOME`; then every
/// credential-shaped name and every `shell.strip_env` pattern removed.
pub fn tool_env(
    ctx: &ProcessContext,
    lookup: impl Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = BASELINE_ENV
        .iter()
        .filter_map(|name| lookup(name).map(|v| (name.to_string(), v)))
        .collect();
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push(("PATH".into(), DEFAULT_PATH.into()));
    }
    for (key, value) in &ctx.env {
        env.retain(|(k, _)| k != key);
        env.push((key.clone(), value.clone()));
    }
    let home = ctx.workdir.join(CAPSULE_HOME);
    env.retain(|(k, _)| k != "HOME");
    env.push(("HOME".into(), home.display().to_string()));
    env.retain(|(name, _)| {
        !is_credential_name(name)
            && !ctx
                .policy
                .shell_strip_env
                .iter()
                .any(|pattern| glob_match(pattern, name))
    });
    env
}

/// `*` matches any run of characters; everything else matches itself.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// Why a native or shell tool's process gave no result.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("cannot create {}: {source}", path.display())]
    Home {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create the tool's pids cgroup: {0}")]
    Cgroup(#[source] std::io::Error),
    #[error(transparent)]
    Jail(#[from] crate::sandbox::JailError),
    #[error("cannot start {}: {source}", program.display())]
    Start {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot wait for {}: {source}", program.display())]
    Wait {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    SaveOutput {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Command(#[from] shell::CommandError),
    /// Which tool: wraps the others.
    #[error("{kind} tool '{name}': {source}")]
    Tool {
        kind: &'static str,
        name: String,
        #[source]
        source: Box<ProcessError>,
    },
    #[error("native tool '{name}' failed: {detail} (its process group was killed)")]
    Killed { name: String, detail: String },
}

impl ProcessError {
    fn of(kind: &'static str, name: &str) -> impl FnOnce(ProcessError) -> ProcessError {
        move |source| ProcessError::Tool {
            kind,
            name: name.to_string(),
            source: Box::new(source),
        }
    }
}

/// Output of one finished (or killed) process.
pub struct Finished {
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stdout_truncated: bool,
    pub stderr: Vec<u8>,
    pub stderr_truncated: bool,
    pub duration: Duration,
    /// Why it was killed, if it was.
    pub killed: Option<&'static str>,
}

/// Runs `program args…` in its own process group with `env` only, feeding
/// `stdin`, keeping at most `max_output` bytes of each stream, and killing the
/// whole group on the deadline or a stop request.
pub async fn run_process(
    program: &Path,
    args: &[String],
    stdin: Option<Vec<u8>>,
    ctx: &ProcessContext,
    max_output: usize,
) -> Result<Finished, ProcessError> {
    let env = tool_env(ctx, |name| std::env::var(name).ok());
    let home = ctx.workdir.join(CAPSULE_HOME);
    // The tool's own HOME (its uid's, when it gets one), reached without
    // following a link the tool may have put there.
    let owner = ctx
        .identity
        .filter(|_| ctx.jail_helper.is_some())
        .map(|id| (id.uid, id.gid));
    let (root, dir) = (ctx.workdir.clone(), home.clone());
    let made =
        tokio::task::spawn_blocking(move || crate::fsx::create_dir_owned(&root, &dir, owner))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
    if let Err(source) = made {
        return Err(ProcessError::Home { path: home, source });
    }
    let started = Instant::now();
    // The call's pids cgroup: removed (and emptied) when this guard goes.
    let mut cgroup = None;
    let mut command = match &ctx.jail_helper {
        Some(helper) => {
            let mut spec = jail_spec(ctx);
            if let Some(pids) = &ctx.pids {
                let max = spec.rlimits.processes.unwrap_or(DEFAULT_PROCESSES);
                let group = pids.create(max).map_err(ProcessError::Cgroup)?;
                spec.cgroup_procs = Some(group.procs_file());
                cgroup = Some(CgroupGuard(Some(group)));
            }
            let (helper, argv) = crate::sandbox::jailed_command(helper, &spec, program, args)?;
            let mut command = tokio::process::Command::new(helper);
            // The helper starts its own session (and so its process group).
            command.args(argv);
            command
        }
        None => {
            let mut command = tokio::process::Command::new(program);
            command.args(args).process_group(0);
            command
        }
    };
    command
        .current_dir(&ctx.workdir)
        .env_clear()
        .envs(env)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().map_err(|source| ProcessError::Start {
        program: program.to_path_buf(),
        source,
    })?;
    let pgid = child.id().map(|id| id as i32);
    let _registered = pgid.map(|pid| origin::Registered::new(pid, &ctx.session_id));
    // If this future is dropped (the capsule was stopped while it waited), the
    // whole group still goes. Declared after `child`, so it runs first, while
    // the group leader is not yet reaped and its id cannot be reused.
    let mut group = GroupKill { pgid };
    if let (Some(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
        tokio::spawn(async move {
            // A tool that does not read its input is not an error.
            let _ = pipe.write_all(&bytes).await;
        });
    }
    let stdout = child
        .stdout
        .take()
        .map(|s| tokio::spawn(capture(s, max_output)));
    let stderr = child
        .stderr
        .take()
        .map(|s| tokio::spawn(capture(s, max_output)));
    let killed = tokio::select! {
        status = child.wait() => {
            status.map_err(|source| ProcessError::Wait {
                program: program.to_path_buf(),
                source,
            })?;
            None
        }
        () = tokio::time::sleep(ctx.timeout) => Some("deadline exceeded"),
        () = ctx.stop.cancelled() => Some("stopped"),
    };
    if killed.is_some() {
        group.kill();
        let _ = child.wait().await;
    } else {
        // The leader is gone; what it left running in its group goes too (a
        // tool's call is over when it returns). The group id cannot have been
        // reused while any of those processes lives in it.
        group.kill();
    }
    // Reaped: the group id may be reused from here on.
    group.pgid = None;
    // Children that left the process group die with the cgroup.
    drop(cgroup);
    let code = child.try_wait().ok().flatten().and_then(|s| s.code());
    let join = |h: Option<tokio::task::JoinHandle<(Vec<u8>, bool)>>| async move {
        match h {
            Some(h) => h.await.unwrap_or_default(),
            None => (Vec::new(), false),
        }
    };
    // Grandchildren may hold the pipes open; do not wait for them forever.
    let grace = Duration::from_millis(500);
    let (stdout, stdout_truncated) = tokio::time::timeout(grace, join(stdout))
        .await
        .unwrap_or_default();
    let (stderr, stderr_truncated) = tokio::time::timeout(grace, join(stderr))
        .await
        .unwrap_or_default();
    Ok(Finished {
        code,
        stdout,
        stdout_truncated,
        stderr,
        stderr_truncated,
        duration: started.elapsed(),
        killed,
    })
}

/// The jail of one tool call: the workdir, the allow-list's TCP ports and
/// rlimits derived from the capsule's limits.
fn jail_spec(ctx: &ProcessContext) -> crate::sandbox::JailSpec {
    use crate::sandbox::JailSpec;
    JailSpec {
        workdir: ctx.workdir.clone(),
        read_only: ctx.policy.read_only.clone(),
        read_write: ctx.policy.read_write.clone(),
        tcp_connect_ports: ctx.policy.tcp_connect_ports(),
        sockets: crate::sandbox::seccomp::Sockets {
            inet: !ctx.policy.network_allow.is_empty(),
            udp: ctx.policy.tools_may_use_udp(),
            unix: ctx.policy.unix_sockets,
        },
        rlimits: rlimits(&ctx.policy, ctx.timeout, ctx.memory_bytes),
        cgroup_procs: None,
        identity: ctx.identity,
        fence: (*ctx.policy.fence).clone(),
    }
}

/// The rlimits of a tool: the capsule's `limits`, else defaults derived from
/// its timeout and memory.
pub fn rlimits(
    policy: &CapabilityPolicy,
    timeout: Duration,
    memory_bytes: u64,
) -> crate::sandbox::Rlimits {
    let limits = &policy.limits;
    crate::sandbox::Rlimits {
        cpu_secs: Some(
            limits
                .cpu_secs
                .unwrap_or_else(|| timeout.as_secs().saturating_add(1)),
        ),
        address_space_bytes: Some(memory_bytes.max(MIN_ADDRESS_SPACE)),
        processes: Some(limits.processes.unwrap_or(DEFAULT_PROCESSES)),
        open_files: Some(limits.open_files.unwrap_or(1024)),
        file_size_bytes: Some(limits.file_size_bytes()),
    }
}

/// Native programs reserve much more address space than they use; below this
/// even a shell may not start.
const MIN_ADDRESS_SPACE: u64 = 512 << 20;

/// Processes (and threads) a tool may have when the capsule names no limit.
const DEFAULT_PROCESSES: u64 = 1024;

/// Empties and removes a call's pids cgroup off the async runtime's threads.
struct CgroupGuard(Option<crate::sandbox::cgroup::ToolCgroup>);

impl Drop for CgroupGuard {
    fn drop(&mut self) {
        if let Some(group) = self.0.take() {
            match tokio::runtime::Handle::try_current() {
                Ok(handle) => {
                    handle.spawn_blocking(move || drop(group));
                }
                Err(_) => drop(group),
            }
        }
    }
}

/// Kills a tool's process group on demand or when dropped.
struct GroupKill {
    pgid: Option<i32>,
}

impl GroupKill {
    fn kill(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            // SAFETY: kill(2) on the process group we created; no memory involved.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Reads a stream to its end, keeping the first `max` bytes.
async fn capture(mut stream: impl AsyncRead + Unpin, max: usize) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut truncated = false;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = max.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                truncated |= n > room;
            }
        }
    }
    (kept, truncated)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(strip: &[&str], env: &[(&str, &str)]) -> ProcessContext {
        let policy = CapabilityPolicy {
            shell_strip_env: strip.iter().map(|s| s.to_string()).collect(),
            ..CapabilityPolicy::default()
        };
        ProcessContext {
            name: "t".into(),
            session_id: "ses_t".into(),
            workdir: PathBuf::from("/w"),
            bookkeeping: PathBuf::from("/w"),
            tool_output_max_bytes: 0,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            policy: Arc::new(policy),
            timeout: Duration::from_secs(1),
            stop: CancellationToken::new(),
            jail_helper: None,
            pids: None,
            identity: None,
            memory_bytes: 128 << 20,
        }
    }

    #[test]
    fn credentials_and_strip_patterns_are_removed_baseline_kept() {
        let ctx = ctx(
            &["MYCO_*"],
            &[
                ("MURMUR_SESSION_ID", "ses_1"),
                ("OPENAI_API_KEY", "sk-secret"),
                ("GITHUB_TOKEN", "ghp"),
                ("MYCO_REGION", "eu"),
                ("RUST_LOG", "info"),
            ],
        );
        let env = tool_env(&ctx, |name| match name {
            "PATH" => Some("/bin".into()),
            "LANG" => Some("C.UTF-8".into()),
            _ => None,
        });
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("PATH"), Some("/bin"));
        assert_eq!(get("LANG"), Some("C.UTF-8"));
        assert_eq!(get("HOME"), Some("/w/.capsule-home"));
        assert_eq!(get("MURMUR_SESSION_ID"), Some("ses_1"));
        assert_eq!(get("RUST_LOG"), Some("info"));
        for gone in ["OPENAI_API_KEY", "GITHUB_TOKEN", "MYCO_REGION"] {
            assert_eq!(get(gone), None, "{gone} must be stripped");
        }
    }

    #[test]
    fn globs() {
        assert!(glob_match("MYCO_*", "MYCO_X"));
        assert!(glob_match("*_SECRET_*", "A_SECRET_B"));
        assert!(glob_match("EXACT", "EXACT"));
        assert!(!glob_match("MYCO_*", "XMYCO_X"));
        assert!(!glob_match("A*B", "AB_"));
    }
}
