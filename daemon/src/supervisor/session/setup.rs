//! Setting a session up: its bookkeeping dir and installed artifacts, the
//! workdir opened to the tool uid, staging notes and warnings, `on-stage`
//! hooks and the lock, and what its tool calls and guests run with.

use std::path::PathBuf;
use std::sync::Arc;

use roost_wire::api::Session;

use super::SessionTask;
use crate::artifacts::SessionArtifacts;
use crate::logs::LogSink;
use crate::runtime::{HookError, ToolSpec};
use crate::staging::Program;
use crate::supervisor::SupervisorError;

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

/// Why a session could not be set up; it fails before its first run.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("cannot create {}: {source}", path.display())]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "cannot open {} to the tools' uid {uid}: {source} (the file system must support POSIX \
         ACLs; or set sandbox.tool_uids: null to run tools as root, which the tier then reports)",
        path.display()
    )]
    Grant {
        path: PathBuf,
        uid: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot install artifacts into {}: {source}", dir.display())]
    Install {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write the task to {}: {source}", path.display())]
    Task {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Fence(crate::policy::fence::FenceError),
    #[error("session directory task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
    #[error("on-stage hook '{hook}' failed: {source}")]
    StageHook {
        hook: String,
        #[source]
        source: HookError,
    },
}

use super::super::grants::{Granted, MAX_GRANTS};

/// A session's directories and installed artifacts being made, on a
/// blocking thread, while its row is written and its start answered.
pub(super) type Installing = tokio::task::JoinHandle<Result<(), SetupError>>;

/// Opens what a session's tools may use to their uid with POSIX ACL entries
/// (modes and owners stay): an operator's workdir and `filesystem.read_write`
/// trees read-write, `read_only` trees read-only (never through a link, not
/// roostd's `.murmur`); a fresh workdir in the state dir at its top, with a
/// way through the state dir and `sessions/` for the tool group (search only:
/// no listing, no file in them opens to it).
fn open_to_tools(
    id: &crate::sandbox::identity::Identity,
    workdir: &std::path::Path,
    policy: &crate::policy::CapabilityPolicy,
    state_dir: &std::path::Path,
) -> Result<(), SetupError> {
    use crate::policy::fence::Access;
    use crate::sandbox::identity::{Grantee, grant, grant_open, grant_tree_open};
    let fail = |path: &std::path::Path, source: std::io::Error| SetupError::Grant {
        path: path.to_path_buf(),
        uid: id.uid,
        source,
    };
    // Each path opened without following a link and held against roostd's
    // own files, then granted by that descriptor.
    let open = |path: &std::path::Path, access, workdir| {
        policy
            .fence
            .open(path, access, workdir, libc::O_RDONLY | libc::O_NONBLOCK)
            .map_err(SetupError::Fence)
    };
    let user = Grantee::User(id.uid);
    let in_state_dir = workdir.starts_with(state_dir);
    let top = open(workdir, Access::Write, true)?;
    if in_state_dir {
        // A fresh directory: what is in it is roostd's, or the tool's own.
        grant_open(&top, user, 7).map_err(|e| fail(workdir, e))?;
    } else {
        // The operator's directory, as the tool would have had it as root,
        // except roostd's bookkeeping.
        let granted = grant_tree_open(top, id.uid, (7, 6), &[".murmur"], MAX_GRANTS)
            .map_err(|e| fail(workdir, e))?;
        if granted >= MAX_GRANTS {
            tracing::warn!(path = %workdir.display(), "workdir opened to the tool uid only in part: over {MAX_GRANTS} entries");
        }
    }
    let extra = policy
        .read_write
        .iter()
        .map(|p| (p, Access::Write, (7, 6)))
        .chain(policy.read_only.iter().map(|p| (p, Access::Read, (5, 4))));
    for (path, access, (dir_perm, file_perm)) in extra {
        let file = open(path, access, false)?;
        let granted = match file.metadata().is_ok_and(|m| m.is_dir()) {
            true => grant_tree_open(file, id.uid, (dir_perm, file_perm), &[], MAX_GRANTS),
            false => grant_open(&file, user, file_perm).map(|()| 1),
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

impl SessionTask {
    /// Takes the session's route in the cluster's route table (nothing to
    /// do on one host): refused when another node runs a session of that
    /// name.
    pub(super) async fn claim_route(&self, resumed: bool) -> Result<(), SupervisorError> {
        let Some(claims) = &self.shared.claims else {
            return Ok(());
        };
        let manifest = &self.staged.manifest;
        let claim = crate::a2a::routing::Claim {
            route: self.name.clone(),
            id: self.id.clone(),
            capsule: manifest.name.clone(),
            version: manifest.version.clone(),
            since: crate::store::now(),
            spec: manifest.card.clone(),
            start: Some(self.staged.request.clone()),
        };
        Ok(claims.claim(claim, resumed).await?)
    }

    /// Creates the bookkeeping dir (installing the staged artifacts into it)
    /// while the row is written, or, when resuming after a daemon restart,
    /// records the restart on the existing row. Returns the record once it
    /// is written, and the installation, which may still be under way.
    pub(super) async fn register(
        &self,
        again: Option<&'static str>,
    ) -> Result<(Session, Installing), SupervisorError> {
        // The bookkeeping dir is the workdir, or inside it. It is made while the
        // row is written, and the start is answered once the row exists,
        // before the directories may be (on this disk two directories cost
        // more than the commit): the run waits for them, and should they
        // fail, it fails with the reason and the row says so.
        let dir = self.bookkeeping.clone();
        let items = self.staged.artifacts.items.clone();
        let shell = self.staged.policy.shell_allow.clone();
        // The task is written once, when the session is created (a resumed
        // or restarted session must not run it again).
        let task = again
            .is_none()
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
            // Held from now until the session ends (then taken back).
            let tree = |p: &std::path::PathBuf| match p.is_dir() {
                true => (p.clone(), Granted::Tree { skip_murmur: false }),
                false => (p.clone(), Granted::One),
            };
            let workdir = match root.starts_with(&state) {
                true => (root.clone(), Granted::One),
                false => (root.clone(), Granted::Tree { skip_murmur: true }),
            };
            let paths = std::iter::once(workdir)
                .chain(policy.read_write.iter().map(tree))
                .chain(policy.read_only.iter().map(tree))
                .collect();
            if let Ok(mut held) = self.held.lock() {
                *held = Some(self.shared.grants.hold(id.uid, paths));
            }
            (id, Arc::clone(policy), state)
        });
        let card = self.staged.manifest.card.clone();
        let install = tokio::task::spawn_blocking(move || -> Result<(), SetupError> {
            // A fresh workdir is made in the state dir (nothing is there yet);
            // an operator's exists already, and is never made through a link
            // planted in its place. Below it, nothing is trusted (`fsx`, which
            // opens the workdir itself without following links too).
            let fresh = std::fs::symlink_metadata(&root)
                .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound);
            (if fresh {
                std::fs::create_dir_all(&root)
            } else {
                Ok(())
            })
            .and_then(|()| crate::fsx::create_dir_all(&root, &dir))
            .map_err(|source| SetupError::Dir {
                path: dir.clone(),
                source,
            })?;
            if let Some((id, policy, state)) = &grants {
                open_to_tools(id, &root, policy, state)?;
            }
            if !items.is_empty() || !shell.is_empty() {
                crate::artifacts::install(&root, &dir, &items, &shell).map_err(|source| {
                    SetupError::Install {
                        dir: dir.clone(),
                        source,
                    }
                })?;
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
                    .map_err(|source| SetupError::Task { path, source })?;
            }
            // What the agent card says comes from the manifest this run staged.
            if let Err(e) = card.save(&root, &dir) {
                tracing::warn!(error = %e, "cannot keep the agent card section");
            }
            Ok(())
        });
        let recorded = self.record(again).await?;
        Ok((recorded, install))
    }

    /// Everything between installation and the first run: the shell/network
    /// warning, `on-stage` hooks (which can fail staging), and the lock.
    pub(super) async fn prepare(&mut self, installing: Installing) -> Result<(), SetupError> {
        installing.await??;
        let staged = &self.staged;
        let policy = &staged.policy;
        if policy.shell_allow.iter().any(|b| b == "bash") && !policy.network_allow.is_empty() {
            tracing::warn!(code = "W-SEC-003", "{BASH_NETWORK_WARNING}");
            self.bootstrap_log(BASH_NETWORK_WARNING).await;
        }
        let capsule_dir = staged.manifest.manifest_path.parent();
        if staged.native_tools
            && let (Some(capsule_dir), Some(workdir)) = (capsule_dir, &staged.user_workdir)
            && capsule_dir.starts_with(workdir)
        {
            tracing::warn!(code = "W-SEC-006", "{CAPSULE_IN_WORKDIR_WARNING}");
            self.bootstrap_log(CAPSULE_IN_WORKDIR_WARNING).await;
        }
        if policy.unix_sockets && staged.native_tools {
            tracing::warn!(code = "W-SEC-004", "{UNIX_SOCKETS_WARNING}");
            self.bootstrap_log(UNIX_SOCKETS_WARNING).await;
        }
        if !staged.sandbox_missing.is_empty() {
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
        let artifacts = Arc::new(
            SessionArtifacts::new(
                self.staged.artifacts.items.clone(),
                self.shared.registry(),
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
            )
            .native_tools(self.staged.native_tools),
        );
        self.artifacts = Some(artifacts);
        Ok(())
    }

    /// `on-stage` hooks, then the lock when the capsule had none.
    pub(super) async fn run_stage_hooks(&self) -> Result<(), SetupError> {
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
                Err(source) => {
                    let error = SetupError::StageHook {
                        hook: item.name.clone(),
                        source,
                    };
                    self.bootstrap_log(&error.to_string()).await;
                    return Err(error);
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
    pub(super) async fn bootstrap_log(&self, line: &str) {
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
    pub(super) fn tool_identity(&self) -> Option<crate::sandbox::identity::Identity> {
        let range = self.shared.tool_uids?;
        let jailed = self.shared.jail.helper().is_some() && self.staged.native_tools;
        jailed.then(|| range.for_workdir(&self.workdir))
    }

    /// Limits and surroundings of this session's tool and hook calls.
    pub(super) fn tool_spec(&self, log: LogSink) -> ToolSpec {
        let env = self.guest_env();
        let processes = crate::tools::SessionProcesses::new(crate::tools::ProcessContext {
            name: String::new(),
            session_id: self.id.clone(),
            workdir: self.workdir.clone(),
            bookkeeping: self.bookkeeping.clone(),
            tool_output_max_bytes: self.shared.config.retention.tool_output.max_bytes,
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
            capsule: self.staged.manifest.name.clone(),
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

    pub(super) fn capsule_url(&self) -> String {
        format!("{}/a2a/{}", self.shared.a2a_base, self.name)
    }

    /// A script capsule's `trace.jsonl`: its A2A sends and calls, and what
    /// the network policy refused (an agent's loop keeps its own).
    pub(super) fn script_trace(&self) -> crate::agent::trace::Trace {
        crate::agent::trace::Trace::new(
            &self.workdir,
            &self.bookkeeping,
            &self.id,
            self.shared.config.retention.trace.max_bytes,
        )
    }

    /// An evaluation's variables from the start request, for an agent's
    /// hooks only (its model and tools never see them).
    pub(super) fn eval_env(&self) -> Vec<(String, String)> {
        let r = &self.staged.request;
        [
            ("MURMUR_EVAL_CONFIG", &r.eval_config),
            ("MURMUR_CASE_ID", &r.case_id),
            ("MURMUR_DATASET_ID", &r.dataset_id),
        ]
        .into_iter()
        .filter_map(|(name, value)| Some((name.to_string(), value.clone()?)))
        .collect()
    }

    /// Allow-listed host variables first, then identity variables so a manifest
    /// can never shadow them.
    pub(super) fn guest_env(&self) -> Vec<(String, String)> {
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
            ("MURMUR_SESSION_ID".to_string(), self.id.to_string()),
            ("MURMUR_CAPSULE_URL".to_string(), self.capsule_url()),
        ]);
        if let Some(job) = &self.staged.request.job_id {
            env.push(("MURMUR_JOB_ID".to_string(), job.clone()));
        }
        // Agents' tools and hooks see the model's name, never its endpoint,
        // config or key (the driver's own environment adds those).
        if let Program::Agent(plan) = &self.staged.program {
            env.extend(plan.inference_env(false));
        }
        env
    }
}

/// Moves what a script capsule's guests noted into its trace, written out.
pub(super) async fn trace_notes(
    notes: &crate::runtime::Notes,
    trace: &mut crate::agent::trace::Trace,
) {
    let taken = notes.take();
    if taken.is_empty() {
        return;
    }
    for note in taken {
        trace.event(note.event, note.fields).await;
    }
    trace.flush().await;
}
