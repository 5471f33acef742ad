//! One session's task: runs the capsule, records each transition, and applies
//! the restart policy with backoff until the session ends for good.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use roost_ctl::api::{RestartPolicy, Session, SessionState};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::backoff::{Backoff, Next};
use super::{Shared, SupervisorError};
use crate::agent::driver::Usage;
use crate::agent::{AgentEnd, AgentPlan, AgentRun};
use crate::artifacts::SessionArtifacts;
use crate::logs::LogSink;
use crate::metrics::Outcome;
use crate::runtime::{GuestFailure, ScriptLaunch, SessionTools, ToolSpec};
use crate::staging::{Program, Staged};
use crate::store::{NewSession, StopReason};

pub(super) struct SessionTask {
    pub(super) shared: Arc<Shared>,
    pub(super) id: String,
    pub(super) name: String,
    pub(super) staged: Staged,
    pub(super) workdir: PathBuf,
    pub(super) bookkeeping: PathBuf,
    pub(super) stop: CancellationToken,
    pub(super) by_shutdown: Arc<AtomicBool>,
    pub(super) restart_count: u32,
    /// The session's artifact table, once staged files are installed.
    pub(super) artifacts: Option<Arc<SessionArtifacts>>,
    /// An agent's A2A inbox, open from the moment the session exists (tasks
    /// sent while it stages wait there) until a launch ends.
    pub(super) inbox: std::sync::Mutex<Option<crate::tasks::InboxRx>>,
}

/// Name of the staging log in a session's `logs/` dir.
const BOOTSTRAP_LOG: &str = "bootstrap.log";

/// W-SEC-003: `bash` can open connections the network allow-list does not see.
const BASH_NETWORK_WARNING: &str = "warning[W-SEC-003]: capabilities.shell.allow includes \
\"bash\" and capabilities.network.allow is non-empty, but network.allow does not constrain \
bash's own outbound connections; treat the capsule as having the network access bash has";
const CAPSULE_IN_WORKDIR_WARNING: &str = "warning[W-SEC-006]: the capsule's directory is inside \
its workdir, so its tools can rewrite its murmur.yaml, murmur.lock, prompt and skills for the next \
start; keep the capsule outside the workdir";
const UNIX_SOCKETS_WARNING: &str = "warning[W-SEC-004]: capabilities.network.unix_sockets lets native and shell tools connect to any Unix socket their files allow (a database's, a container runtime's, a desktop bus); roostd's control socket still refuses them";

/// Most files and directories opened to a tool uid per path at session start.
const MAX_GRANTS: usize = 100_000;

/// Opens what a session's tools may use to their uid with POSIX ACL entries
/// (modes and owners stay): an operator's workdir and `filesystem.read_write`
/// trees read-write, `read_only` trees read-only (never through a link, not
/// roostd's `.murmur`); a fresh workdir in the state dir at its top, with a
/// way through the state dir and `sessions/` for the tool group (search only:
/// no listing, no file in them opens to it).
fn open_to_tools(
    id: &crate::sandbox::identity::Identity,
    workdir: &std::path::Path,
    read_write: &[std::path::PathBuf],
    read_only: &[std::path::PathBuf],
    state_dir: &std::path::Path,
) -> Result<(), String> {
    use crate::sandbox::identity::{Grantee, grant};
    let fail = |path: &std::path::Path, e: std::io::Error| {
        format!(
            "cannot open {} to the tools' uid {}: {e} (the file system must support POSIX \
             ACLs; or set sandbox.tool_uids: null to run tools as root, which the tier \
             then reports)",
            path.display(),
            id.uid
        )
    };
    use crate::sandbox::identity::grant_tree;
    let user = Grantee::User(id.uid);
    let in_state_dir = workdir.starts_with(state_dir);
    if in_state_dir {
        // A fresh directory: what is in it is roostd's, or the tool's own.
        grant(workdir, user, 7).map_err(|e| fail(workdir, e))?;
    } else {
        // The operator's directory, as the tool would have had it as root,
        // except roostd's bookkeeping.
        let granted = grant_tree(workdir, id.uid, (7, 6), &[".murmur"], MAX_GRANTS)
            .map_err(|e| fail(workdir, e))?;
        if granted >= MAX_GRANTS {
            tracing::warn!(path = %workdir.display(), "workdir opened to the tool uid only in part: over {MAX_GRANTS} entries");
        }
    }
    for path in read_write {
        let granted = if path.is_dir() {
            grant_tree(path, id.uid, (7, 6), &[], MAX_GRANTS)
        } else {
            grant(path, user, 6).map(|()| 1)
        };
        granted.map_err(|e| fail(path, e))?;
    }
    for path in read_only {
        let granted = if path.is_dir() {
            grant_tree(path, id.uid, (5, 4), &[], MAX_GRANTS)
        } else {
            grant(path, user, 4).map(|()| 1)
        };
        granted.map_err(|e| fail(path, e))?;
    }
    if in_state_dir {
        let group = Grantee::Group(id.group);
        for path in [state_dir.to_path_buf(), state_dir.join("sessions")] {
            grant(&path, group, 1).map_err(|e| fail(&path, e))?;
        }
    }
    Ok(())
}

/// How long a session without a task waits for one: `MURMUR_A2A_TIMEOUT_SECS`
/// of roostd's environment, default 30 s (as upstream).
fn idle_timeout() -> std::time::Duration {
    let secs = std::env::var("MURMUR_A2A_TIMEOUT_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    std::time::Duration::from_secs(secs)
}

/// How one run ended.
enum RunEnd {
    Completed,
    Failed(String),
    Stopped,
}

impl SessionTask {
    /// Records the session (answering `reply` once the row exists), runs it until
    /// it ends for good, and returns the final record.
    pub(super) async fn run(
        mut self,
        resumed: bool,
        reply: oneshot::Sender<Result<Session, SupervisorError>>,
    ) -> Option<Session> {
        // The phases are boxed so that a long-lived session (an agent waiting on
        // its model) keeps only the state of the phase it is in.
        // Open before the session is reported, so a client can send it a
        // task as soon as `start` returns.
        let inbox = self.open_inbox();
        if let Ok(mut slot) = self.inbox.lock() {
            *slot = inbox;
        }
        let installed = match Box::pin(self.register(resumed)).await {
            Ok((session, installed)) => {
                self.shared.add_route(&self.id, &self.name);
                let _ = reply.send(Ok(session));
                installed
            }
            Err(error) => {
                tracing::warn!(%error, "cannot record session");
                let _ = reply.send(Err(error));
                return None;
            }
        };
        if let Err(error) = Box::pin(self.prepare(installed)).await {
            tracing::warn!(%error, "staging failed");
            let error = format!("staging failed: {error}");
            return Box::pin(self.finish(SessionState::Failed, Some(&error))).await;
        }
        let mut backoff = Backoff::new(self.shared.config.restart.clone());
        // A fresh row is written as `running`; restarts and resumes are not.
        let mut recorded_running = !resumed;
        let (state, error) = loop {
            let started = Instant::now();
            let end =
                Box::pin(self.run_once(std::mem::replace(&mut recorded_running, false))).await;
            let (failed, error) = match &end {
                RunEnd::Stopped => break (SessionState::Stopped, None),
                RunEnd::Completed => (false, None),
                RunEnd::Failed(error) => (true, Some(error.clone())),
            };
            let restart = match self.staged.request.restart {
                RestartPolicy::No => false,
                RestartPolicy::OnFailure => failed,
                RestartPolicy::Always => true,
            };
            let final_state = if failed {
                SessionState::Failed
            } else {
                SessionState::Completed
            };
            if !restart {
                break (final_state, error);
            }
            let delay = match backoff.next(started.elapsed()) {
                Next::RestartAfter(delay) => delay,
                Next::GiveUp { restarts } => {
                    let last = error.as_deref().unwrap_or("completed");
                    let message = format!(
                        "gave up after {restarts} consecutive restarts (restart.max_restarts); \
                         last run: {last}"
                    );
                    break (SessionState::Failed, Some(message));
                }
            };
            self.restart_count += 1;
            tracing::info!(
                restart_count = self.restart_count,
                delay_ms = delay.as_millis() as u64,
                error = error.as_deref().unwrap_or(""),
                "restarting capsule"
            );
            if let Err(e) = Box::pin(self.shared.store.mark_restarting(
                &self.id,
                self.restart_count,
                error.as_deref(),
            ))
            .await
            {
                tracing::error!(error = %e, "cannot record restart");
            }
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.stop.cancelled() => break (SessionState::Stopped, error),
            }
            self.shared.metrics.session_restarted();
        };
        Box::pin(self.finish(state, error.as_deref())).await
    }

    /// Creates the bookkeeping dir (installing the staged artifacts into it)
    /// while the row is written, or, when resuming after a daemon restart,
    /// records the restart on the existing row. Returns the record and the
    /// outcome of the installation.
    async fn register(
        &self,
        resumed: bool,
    ) -> Result<(Session, Result<(), String>), SupervisorError> {
        // The bookkeeping dir is the workdir, or inside it. It is made while the
        // row is written (a directory costs as much as a commit here); should it
        // fail, the run fails with the reason and the row says so.
        let dir = self.bookkeeping.clone();
        let items = self.staged.artifacts.items.clone();
        let shell = self.staged.policy.shell_allow.clone();
        // The task is written once, when the session is created (a resumed
        // session must not run it again).
        let task = (!resumed)
            .then(|| self.staged.request.task.clone())
            .flatten()
            .map(|text| (self.workdir.join(crate::agent::TASK_FILE), text));
        // A manifest holding a literal API key stays out of the workdir, where
        // the model's tools could read it.
        let literal_key = matches!(
            &self.staged.manifest.kind,
            crate::manifest::CapsuleKind::Agent(spec)
                if matches!(spec.api_key, Some(crate::manifest::ApiKeySpec::Literal(_)))
        );
        if literal_key && self.staged.user_workdir.is_some() {
            tracing::info!(
                "murmur.yaml is not copied into the workdir: it holds a literal inference.api_key"
            );
        }
        let copy_manifest = self
            .staged
            .user_workdir
            .as_ref()
            .filter(|_| !literal_key)
            .map(|w| {
                (
                    self.staged.manifest.manifest_path.clone(),
                    w.join(crate::manifest::MANIFEST_FILENAME),
                )
            });
        // Tools may write anywhere below the workdir: nothing below it is
        // reached through a link (crate::fsx).
        let root = self.workdir.clone();
        let grants = self.tool_identity().map(|id| {
            let policy = &self.staged.policy;
            let state = self.shared.config.state_dir.clone();
            (
                id,
                policy.read_write.clone(),
                policy.read_only.clone(),
                state,
            )
        });
        let install = tokio::task::spawn_blocking(move || -> Result<(), String> {
            // The workdir itself is trusted (the operator's, or a fresh one in
            // the state dir); below it, nothing is.
            std::fs::create_dir_all(&root)
                .and_then(|()| crate::fsx::create_dir_all(&root, &dir))
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            if let Some((id, read_write, read_only, state)) = &grants {
                open_to_tools(id, &root, read_write, read_only, state)?;
            }
            if !items.is_empty() || !shell.is_empty() {
                crate::artifacts::install(&root, &dir, &items, &shell)
                    .map_err(|e| format!("cannot install artifacts into {}: {e}", dir.display()))?;
            }
            // The capsule can read its own manifest by relative path.
            if let Some((from, to)) = copy_manifest {
                let copied = std::fs::read(&from)
                    .and_then(|bytes| crate::fsx::write_if_absent(&root, &to, &bytes, 0o644));
                if let Err(e) = copied {
                    tracing::warn!(error = %e, "cannot copy murmur.yaml into the workdir");
                }
            }
            if let Some((path, text)) = task {
                crate::fsx::replace(&root, &path, text.as_bytes(), 0o644)
                    .map_err(|e| format!("cannot write the task to {}: {e}", path.display()))?;
            }
            Ok(())
        });
        let (made, recorded) = tokio::join!(install, self.record(resumed));
        let installed = match made {
            Ok(result) => result,
            Err(error) => Err(format!("session directory task failed: {error}")),
        };
        Ok((recorded?, installed))
    }

    /// Everything between installation and the first run: the shell/network
    /// warning, `on-stage` hooks (which can fail staging), and the lock.
    async fn prepare(&mut self, installed: Result<(), String>) -> Result<(), String> {
        installed?;
        let staged = &self.staged;
        let policy = &staged.policy;
        if policy.shell_allow.iter().any(|b| b == "bash") && !policy.network_allow.is_empty() {
            tracing::warn!(code = "W-SEC-003", "{BASH_NETWORK_WARNING}");
            self.bootstrap_log(BASH_NETWORK_WARNING).await;
        }
        let capsule_dir = staged.manifest.manifest_path.parent();
        if staged.sandbox != crate::sandbox::NO_NATIVE_TOOLS
            && let (Some(capsule_dir), Some(workdir)) = (capsule_dir, &staged.user_workdir)
            && capsule_dir.starts_with(workdir)
        {
            tracing::warn!(code = "W-SEC-006", "{CAPSULE_IN_WORKDIR_WARNING}");
            self.bootstrap_log(CAPSULE_IN_WORKDIR_WARNING).await;
        }
        if policy.unix_sockets && staged.sandbox != crate::sandbox::NO_NATIVE_TOOLS {
            tracing::warn!(code = "W-SEC-004", "{UNIX_SOCKETS_WARNING}");
            self.bootstrap_log(UNIX_SOCKETS_WARNING).await;
        }
        if staged.sandbox.contains(": missing") {
            let line = format!(
                "warning: tools run with a partial jail ({}); sandbox.unenforceable is warn",
                staged.sandbox
            );
            tracing::warn!(sandbox = %staged.sandbox, "tools run with a partial jail");
            self.bootstrap_log(&line).await;
        }
        if !staged.artifacts.items.is_empty() {
            self.run_stage_hooks().await?;
        }
        let shared = Arc::clone(&self.shared);
        let id = self.id.clone();
        let artifacts = Arc::new(SessionArtifacts::new(
            self.staged.artifacts.items.clone(),
            Arc::clone(&self.shared.registry),
            self.workdir.clone(),
            self.bookkeeping.clone(),
            self.staged.artifacts.lock_path.clone(),
            self.shared.config.artifacts.max_bundle_mb << 20,
            Box::new(move |records| {
                let shared = Arc::clone(&shared);
                let id = id.clone();
                tokio::spawn(async move {
                    if let Err(error) = shared.store.set_artifacts(&id, &records).await {
                        tracing::warn!(%error, "cannot record artifacts");
                    }
                });
            }),
        ));
        self.artifacts = Some(artifacts);
        Ok(())
    }

    /// `on-stage` hooks, then the lock when the capsule had none.
    async fn run_stage_hooks(&self) -> Result<(), String> {
        let staged = &self.staged;
        let log = LogSink::within(
            &self.workdir,
            &self.bookkeeping.join("logs"),
            self.shared.config.logs.max_bytes,
        );
        let spec = self.tool_spec(log);
        let payload = serde_json::json!({
            "session_id": self.id,
            "capsule": staged.manifest.name,
            "version": staged.manifest.version,
            "workdir": self.workdir,
            "artifacts": staged.artifacts.items.iter().map(|i| i.record()).collect::<Vec<_>>(),
        })
        .to_string();
        for item in &staged.artifacts.items {
            let Some((hook, manifest)) = item.hook() else {
                continue;
            };
            if !manifest.hook.as_ref().is_some_and(|h| h.handles("stage")) {
                continue;
            }
            let answer = self
                .shared
                .runtime
                .call_hook(&hook, "stage", &payload, &spec)
                .await;
            match answer {
                Ok(_) => tracing::info!(hook = %item.name, "on-stage hook passed"),
                Err(error) => {
                    let message = format!("on-stage hook '{}' failed: {error}", item.name);
                    self.bootstrap_log(&message).await;
                    return Err(message);
                }
            }
        }
        if let Some(lock) = &staged.artifacts.new_lock {
            let path = staged.artifacts.lock_path.clone();
            let lock = lock.clone();
            let written = tokio::task::spawn_blocking(move || lock.write_atomic(&path)).await;
            match written {
                Ok(Ok(())) => tracing::info!(
                    path = %staged.artifacts.lock_path.display(),
                    "wrote murmur.lock pinning every artifact"
                ),
                Ok(Err(error)) => {
                    let message = format!(
                        "{error}; the capsule runs, but its artifacts are not pinned (make the \
                         capsule dir writable by roostd, or commit a murmur.lock)"
                    );
                    tracing::warn!(%message, "murmur.lock not written");
                    self.bootstrap_log(&message).await;
                }
                Err(error) => tracing::warn!(%error, "lock task failed"),
            }
        }
        Ok(())
    }

    /// Appends a line to `logs/bootstrap.log` (staging notes for the operator).
    async fn bootstrap_log(&self, line: &str) {
        use std::io::Write;
        let root = self.workdir.clone();
        let path = self.bookkeeping.join("logs").join(BOOTSTRAP_LOG);
        let line = format!("[{}] {line}\n", crate::store::now());
        let written = tokio::task::spawn_blocking(move || {
            crate::fsx::append(&root, &path)?.write_all(line.as_bytes())
        })
        .await;
        if let Ok(Err(error)) = written {
            tracing::warn!(%error, "cannot write bootstrap.log");
        }
    }

    /// The uid this session's jailed tools run as: one per workdir, when
    /// roostd runs as root and the session has native or shell tools.
    fn tool_identity(&self) -> Option<crate::sandbox::identity::Identity> {
        let range = self.shared.tool_uids?;
        let jailed = self.shared.jail.helper().is_some()
            && self.staged.sandbox != crate::sandbox::NO_NATIVE_TOOLS;
        jailed.then(|| range.for_workdir(&self.workdir))
    }

    /// Limits and surroundings of this session's tool and hook calls.
    fn tool_spec(&self, log: LogSink) -> ToolSpec {
        let env = self.guest_env();
        let processes = crate::tools::SessionProcesses::new(crate::tools::ProcessContext {
            name: String::new(),
            session_id: self.id.clone(),
            workdir: self.workdir.clone(),
            bookkeeping: self.bookkeeping.clone(),
            env: env.clone(),
            policy: Arc::clone(&self.staged.policy),
            timeout: self.staged.timeout,
            stop: self.stop.clone(),
            jail_helper: self.shared.jail.helper().map(std::path::Path::to_path_buf),
            pids: self.shared.pids.clone(),
            identity: self.tool_identity(),
            memory_bytes: self.staged.memory_bytes,
        });
        ToolSpec {
            session_id: self.id.clone(),
            workdir: self.workdir.clone(),
            bookkeeping: self.bookkeeping.clone(),
            env,
            timeout: self.staged.timeout,
            memory_bytes: self.staged.memory_bytes,
            policy: Arc::clone(&self.staged.policy),
            log,
            stop: self.stop.clone(),
            processes: Arc::new(processes),
            notes: None,
            task: None,
        }
    }

    async fn record(&self, resumed: bool) -> Result<Session, SupervisorError> {
        let store = &self.shared.store;
        if resumed {
            self.shared.metrics.session_restarted();
            return Ok(store
                .mark_restarting(
                    &self.id,
                    self.restart_count,
                    Some("resumed after roostd restart"),
                )
                .await?);
        }
        let manifest = &self.staged.manifest;
        Ok(store
            .insert_session(&NewSession {
                id: &self.id,
                name: &self.name,
                capsule: &manifest.name,
                version: &manifest.version,
                manifest: &manifest.manifest_path.display().to_string(),
                workdir: &self.workdir.display().to_string(),
                bookkeeping_dir: &self.bookkeeping.display().to_string(),
                request: &self.staged.request,
                artifacts: &self
                    .staged
                    .artifacts
                    .items
                    .iter()
                    .map(|i| i.record())
                    .collect::<Vec<_>>(),
                sandbox: &self.staged.sandbox,
            })
            .await?)
    }

    async fn run_once(&self, recorded_running: bool) -> RunEnd {
        if self.stop.is_cancelled() {
            return RunEnd::Stopped;
        }
        let log = LogSink::within(
            &self.workdir,
            &self.bookkeeping.join("logs"),
            self.shared.config.logs.max_bytes,
        );
        if !recorded_running && let Err(e) = self.shared.store.mark_running(&self.id).await {
            return RunEnd::Failed(format!("cannot record running state: {e}"));
        }
        self.shared.metrics.session_started();
        let mut spec = self.tool_spec(log.clone());
        if matches!(self.staged.program, Program::Agent(_)) {
            // An agent's trace records what the policy refused its guests.
            spec.notes = Some(Arc::default());
        }
        // Tool calls made for an A2A task may ask its client for input.
        spec.task = Some(crate::tasks::TaskSlot::default());
        let tools = self.artifacts.as_ref().map(|artifacts| {
            self.shared.runtime.session_tools(
                spec.clone(),
                self.staged.allowlist.clone(),
                Arc::clone(artifacts) as Arc<dyn crate::runtime::Catalog>,
            )
        });
        let (prepared, lifecycle) = match &self.staged.program {
            Program::Script(prepared) => (prepared, None),
            Program::Handler(prepared, lifecycle) => (prepared, Some(lifecycle)),
            Program::Agent(plan) => return Box::pin(self.run_agent(plan, tools, spec)).await,
        };
        tracing::info!(sha256 = prepared.sha256(), "running capsule");
        let launch = ScriptLaunch {
            tools,
            session_id: self.id.clone(),
            workdir: self.workdir.clone(),
            env: self.guest_env(),
            timeout: self.staged.timeout,
            memory_bytes: self.staged.memory_bytes,
            policy: Arc::clone(&self.staged.policy),
            log,
        };
        if let Some(lifecycle) = lifecycle {
            return Box::pin(self.serve_tasks(prepared, lifecycle, launch)).await;
        }
        let result = Box::pin(
            self.shared
                .runtime
                .run_script(prepared, launch, self.stop.clone()),
        )
        .await;
        match result {
            Ok(()) => RunEnd::Completed,
            Err(GuestFailure::Stopped) => RunEnd::Stopped,
            Err(failure) => {
                tracing::info!(error = %failure, "capsule failed");
                RunEnd::Failed(failure.to_string())
            }
        }
    }

    /// One launch of an agent capsule: the host-run tool-use loop.
    async fn run_agent(
        &self,
        plan: &Arc<AgentPlan>,
        tools: Option<Arc<SessionTools>>,
        tool_spec: ToolSpec,
    ) -> RunEnd {
        let (Some(tools), Some(artifacts)) = (tools, self.artifacts.clone()) else {
            return RunEnd::Failed("agent session has no tool table (staging incomplete)".into());
        };
        tracing::info!(model = %plan.spec.model, driver = %plan.spec.driver, "running agent");
        let used_before = match self.shared.store.get(&self.id).await {
            Ok(Some(session)) => Usage {
                input_tokens: session.usage.input_tokens,
                output_tokens: session.usage.output_tokens,
            },
            _ => Usage::default(),
        };
        let inbox = self.launch_inbox();
        let mut driver_spec = tool_spec.clone();
        driver_spec.env.extend(plan.inference_env(true));
        let task_slot = tool_spec.task.clone().unwrap_or_default();
        let run = AgentRun {
            plan: Arc::clone(plan),
            runtime: &self.shared.runtime,
            store: &self.shared.store,
            tools,
            artifacts,
            policy: Arc::clone(&self.staged.policy),
            allowlist: self.staged.allowlist.clone(),
            tool_spec,
            driver_spec,
            capsule: self.staged.manifest.name.clone(),
            version: self.staged.manifest.version.clone(),
            session_id: self.id.clone(),
            url: self.capsule_url(),
            workdir: self.workdir.clone(),
            bookkeeping: self.bookkeeping.clone(),
            checkpoint_key: self.shared.checkpoint_key.clone(),
            stop: self.stop.clone(),
            idle_timeout: idle_timeout(),
            used_before,
            broker: Arc::clone(&self.shared.tasks),
            task_slot,
            shutdown: Arc::clone(&self.by_shutdown),
            inbox: std::sync::Mutex::new(inbox),
        };
        match Box::pin(run.run()).await {
            AgentEnd::Completed => RunEnd::Completed,
            AgentEnd::Stopped => RunEnd::Stopped,
            AgentEnd::Failed(error) => {
                tracing::info!(%error, "agent failed");
                RunEnd::Failed(error)
            }
        }
    }

    /// One launch of a script capsule that serves A2A tasks: each task in a
    /// fresh instance, per the lifecycle (no `task.md`: tasks come over A2A).
    async fn serve_tasks(
        &self,
        prepared: &Arc<crate::runtime::PreparedCapsule>,
        lifecycle: &crate::manifest::Lifecycle,
        launch: ScriptLaunch,
    ) -> RunEnd {
        use crate::manifest::{AfterTask, TaskAcceptance};
        use crate::tasks::{Next, Outcome, Queue};
        let broker = &self.shared.tasks;
        let inbox = self.launch_inbox();
        let mut queue = Queue::open(broker, &self.id, inbox).await;
        let forever = lifecycle.task_acceptance == TaskAcceptance::Queue
            && lifecycle.after_task == AfterTask::Sleep;
        let ends = lifecycle.task_acceptance == TaskAcceptance::Single
            || lifecycle.after_task == AfterTask::Exit;
        let input_timeout = Some(std::time::Duration::from_secs(lifecycle.input_timeout_secs));
        // Each task has its own instance, so tasks may run side by side
        // (`concurrency`; one for `single`).
        let concurrency = if ends {
            1
        } else {
            lifecycle.concurrency.max(1) as usize
        };
        let serve = |incoming: crate::tasks::Incoming| {
            broker.serve(incoming, input_timeout, None, |link, incoming| async {
                tracing::info!(task_id = %link.task_id, "A2A task handed to the capsule");
                let crate::tasks::Incoming {
                    message_id, text, ..
                } = incoming;
                self.shared
                    .runtime
                    .handle_task(
                        prepared,
                        &launch,
                        Arc::new(link),
                        &message_id,
                        text,
                        &self.stop,
                    )
                    .await
            })
        };
        let mut running = futures::stream::FuturesUnordered::new();
        let mut closed = false;
        let mut end = None;
        while end.is_none() {
            let idle = (!forever && running.is_empty()).then(idle_timeout);
            let room = !closed && running.len() < concurrency;
            tokio::select! {
                Some(outcome) = futures::StreamExt::next(&mut running), if !running.is_empty() => {
                    match outcome {
                        Some(Outcome::Stopped) => end = Some(RunEnd::Stopped),
                        Some(Outcome::Failed(e)) if ends => end = Some(RunEnd::Failed(e)),
                        Some(_) if ends => end = Some(RunEnd::Completed),
                        _ if closed && running.is_empty() => end = Some(RunEnd::Completed),
                        _ => {}
                    }
                }
                next = queue.next(idle, &self.stop), if room => match next {
                    Next::Task(task) => running.push(serve(task)),
                    Next::Stopped => end = Some(RunEnd::Stopped),
                    Next::Closed | Next::Idle if running.is_empty() => end = Some(RunEnd::Completed),
                    Next::Closed | Next::Idle => closed = true,
                },
            }
        }
        // Tasks still running see the stop (or finish) before the launch ends.
        while futures::StreamExt::next(&mut running).await.is_some() {}
        let end = end.unwrap_or(RunEnd::Completed);
        queue
            .release(
                broker,
                &self.id,
                self.by_shutdown.load(std::sync::atomic::Ordering::Relaxed),
            )
            .await;
        end
    }

    /// This launch's inbox: the one opened with the session, or a fresh one
    /// for a restart (the previous launch closed its own).
    fn launch_inbox(&self) -> Option<crate::tasks::InboxRx> {
        self.inbox
            .lock()
            .ok()
            .and_then(|mut slot| slot.take())
            .or_else(|| self.open_inbox())
    }

    /// An inbox for A2A tasks, sized by the lifecycle (`None` for script
    /// capsules that serve no tasks and `task_acceptance: none`).
    fn open_inbox(&self) -> Option<crate::tasks::InboxRx> {
        let lifecycle = self.staged.program.lifecycle()?;
        let depth = match lifecycle.task_acceptance {
            crate::manifest::TaskAcceptance::None => return None,
            crate::manifest::TaskAcceptance::Single => 1,
            crate::manifest::TaskAcceptance::Queue => lifecycle.queue_depth as usize,
        };
        Some(self.shared.tasks.open_inbox(&self.id, depth))
    }

    fn capsule_url(&self) -> String {
        format!("{}/a2a/{}", self.shared.a2a_base, self.name)
    }

    /// Allow-listed host variables first, then identity variables so a manifest
    /// can never shadow them.
    fn guest_env(&self) -> Vec<(String, String)> {
        let manifest = &self.staged.manifest;
        let mut env = self
            .staged
            .policy
            .guest_env(|name| std::env::var(name).ok());
        env.extend([
            ("MURMUR_CAPSULE_NAME".to_string(), manifest.name.clone()),
            (
                "MURMUR_CAPSULE_VERSION".to_string(),
                manifest.version.clone(),
            ),
            ("MURMUR_SESSION_ID".to_string(), self.id.clone()),
            ("MURMUR_CAPSULE_URL".to_string(), self.capsule_url()),
        ]);
        // Agents' tools and hooks see the model's name, never its endpoint,
        // config or key (the driver's own environment adds those).
        if let Program::Agent(plan) = &self.staged.program {
            env.extend(plan.inference_env(false));
        }
        env
    }

    async fn finish(&self, state: SessionState, error: Option<&str>) -> Option<Session> {
        // Tasks still waiting for a session that ends fail visibly (on a
        // shutdown they stay queued for the restarted session).
        let inbox = self.inbox.lock().ok().and_then(|mut slot| slot.take());
        if self.by_shutdown.load(Ordering::Relaxed) {
            self.shared.tasks.detach_inbox(&self.id);
        } else {
            if let Some(inbox) = inbox {
                self.shared.tasks.close_inbox(&self.id, inbox).await;
            }
            let pending = self.shared.tasks.pending(&self.id).await;
            self.shared
                .tasks
                .fail_all(
                    pending.into_iter().map(|t| t.task_id),
                    crate::tasks::NEVER_RAN,
                )
                .await;
        }
        let stop_reason = (state == SessionState::Stopped).then(|| {
            if self.by_shutdown.load(Ordering::Relaxed) {
                StopReason::Shutdown
            } else {
                StopReason::Operator
            }
        });
        let outcome = match state {
            SessionState::Completed => Outcome::Completed,
            SessionState::Stopped => Outcome::Stopped,
            SessionState::Interrupted => Outcome::Interrupted,
            _ => Outcome::Failed,
        };
        self.shared.metrics.outcome(outcome);
        tracing::info!(state = %state, error = error.unwrap_or(""), "session ended");
        match self
            .shared
            .store
            .mark_ended(&self.id, state, error, stop_reason)
            .await
        {
            Ok(session) => Some(session),
            Err(e) => {
                tracing::error!(error = %e, "cannot record session end");
                None
            }
        }
    }
}
