//! One session's task: runs the capsule, records each transition, and applies
//! the restart policy with backoff until the session ends for good.

use crate::telemetry::{Kind, Span};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use roost_wire::api::{RestartPolicy, Session, SessionState};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::backoff::{Backoff, Retry};
use super::{Shared, SupervisorError};
use crate::agent::driver::Usage;
use crate::agent::{AgentEnd, AgentPlan, AgentRun};
use crate::artifacts::SessionArtifacts;
use crate::ids::SessionId;
use crate::logs::LogSink;
use crate::metrics::SessionOutcome;
use crate::runtime::{GuestFailure, ScriptLaunch, SessionTools, ToolSpec};
use crate::staging::{Program, Staged};
use crate::store::{NewSession, StopReason};
use setup::trace_notes;

mod hibernate;
mod serve;
mod setup;

/// What a woken session's launch says of itself (its events and log).
pub(super) const WOKEN: &str = "woken by a task";

pub(super) struct SessionTask {
    pub(super) shared: Arc<Shared>,
    pub(super) id: SessionId,
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
    /// The ACL entries its tool uid was given, taken back when it ends.
    pub(super) held: std::sync::Mutex<Option<super::grants::Held>>,
    /// Awaited once the row exists, before anything runs (see `Resume`).
    pub(super) arriving: std::sync::Mutex<Option<futures::future::BoxFuture<'static, ()>>>,
    /// Set when this launch ended hibernated (the owner keeps its route).
    pub(super) hibernated: Arc<AtomicBool>,
    /// Whether tasks can be stored for it: it takes tasks, or it ran
    /// before under this id (resumed, restarted, upgraded, woken, taken
    /// over). A new session that takes none has none to fail at its end.
    pub(super) may_hold_tasks: bool,
}

/// How one run ended.
enum RunEnd {
    Completed,
    Failed(String),
    Stopped,
    /// Idle for `lifecycle.hibernate_after` (its inbox parked).
    Hibernated,
}

/// A script capsule's `run`.
impl From<Result<(), GuestFailure>> for RunEnd {
    fn from(result: Result<(), GuestFailure>) -> Self {
        match result {
            Ok(()) => Self::Completed,
            Err(GuestFailure::Stopped) => Self::Stopped,
            Err(failure) => {
                tracing::info!(error = %failure, "capsule failed");
                Self::Failed(failure.to_string())
            }
        }
    }
}

impl From<AgentEnd> for RunEnd {
    fn from(end: AgentEnd) -> Self {
        match end {
            AgentEnd::Completed => Self::Completed,
            AgentEnd::Stopped => Self::Stopped,
            AgentEnd::Hibernated => Self::Hibernated,
            AgentEnd::Failed(error) => {
                tracing::info!(%error, "agent failed");
                Self::Failed(error)
            }
        }
    }
}

impl SessionTask {
    /// Records the session (answering `reply` once the row exists), runs it until
    /// it ends for good, and returns the final record.
    pub(super) async fn run(
        mut self,
        again: Option<&'static str>,
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
        // In a cluster the route is taken there first: a name another node
        // runs is refused before anything is recorded.
        if let Err(error) = self.claim_route(again.is_some()).await {
            tracing::warn!(%error, "route refused by the cluster");
            let _ = reply.send(Err(error));
            return None;
        }
        let installing = match Box::pin(self.register(again)).await {
            Ok((session, installing)) => {
                let arriving = self.arriving.lock().ok().and_then(|mut a| a.take());
                if let Some(arriving) = arriving {
                    arriving.await;
                }
                self.shared.add_route(&self.id, &self.name);
                // A woken session's schedules are where it left them. A
                // capsule's own are there when its start is answered;
                // clearing those an earlier version of the route left (a
                // manifest without any) comes after the answer.
                let schedules = again != Some(WOKEN);
                let own = !self.staged.manifest.schedules.is_empty();
                if schedules && own {
                    self.install_schedules().await;
                }
                let _ = reply.send(Ok(session));
                // The answer goes out before this task's next store call.
                tokio::task::yield_now().await;
                if schedules && !own {
                    self.install_schedules().await;
                }
                installing
            }
            Err(error) => {
                tracing::warn!(%error, "cannot record session");
                let _ = reply.send(Err(error));
                return None;
            }
        };
        if let Err(error) = Box::pin(self.prepare(installing)).await {
            tracing::warn!(%error, "staging failed");
            let error = format!("staging failed: {error}");
            return Box::pin(self.finish(SessionState::Failed, Some(&error))).await;
        }
        let mut backoff = Backoff::new(self.shared.config.restart.clone());
        // A fresh row is written as `running`; restarts and resumes are not.
        let mut recorded_running = again.is_none() || again == Some(WOKEN);
        let (state, error) = loop {
            let started = Instant::now();
            let mut span = Span::root_in(
                format!("session run {}", self.staged.manifest.name),
                Kind::Internal,
                None,
                &crate::tasks::trace_id_of(&self.id),
            );
            span.set("roost.session_id", self.id.to_string());
            span.set("roost.capsule", self.staged.manifest.name.as_str());
            span.set("roost.route", self.name.as_str());
            span.set("roost.restart_count", u64::from(self.restart_count));
            let run = Box::pin(self.run_once(std::mem::replace(&mut recorded_running, false)));
            let end = crate::telemetry::scope(span.traceparent(), run).await;
            if let RunEnd::Failed(error) = &end {
                span.fail(error.as_str());
            }
            drop(span);
            let (failed, error) = match &end {
                RunEnd::Stopped => break (SessionState::Stopped, None),
                RunEnd::Hibernated => break (SessionState::Hibernated, None),
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
                Retry::RestartAfter(delay) => delay,
                Retry::GiveUp { restarts } => {
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

    /// The capsule's own schedules (`schedules:`), written for its route.
    async fn install_schedules(&self) {
        let schedules = &self.staged.manifest.schedules;
        match crate::schedules::manifest::install(&self.shared.store, &self.name, schedules).await {
            Ok(true) => self.shared.schedules_changed.notify_one(),
            Ok(false) => {}
            Err(error) => tracing::warn!(%error, "cannot write the capsule's schedules"),
        }
    }

    /// Writes the session's row, or records on its existing row why it
    /// runs `again` (resumed after a roostd restart, restarted by an operator).
    async fn record(&self, again: Option<&'static str>) -> Result<Session, SupervisorError> {
        let store = &self.shared.store;
        let manifest = &self.staged.manifest;
        if again == Some(WOKEN) {
            return Ok(store.mark_woken(&self.id).await?);
        }
        // Another version of a session that ran here: its row and history
        // say which.
        if let Some(why) = again
            && (why == super::upgrade::UPGRADED || why == super::upgrade::ROLLED_BACK)
        {
            let kind = if why == super::upgrade::UPGRADED {
                "upgrade"
            } else {
                "rollback"
            };
            return Ok(store
                .record_upgrade(
                    &self.id,
                    &manifest.name,
                    &manifest.version,
                    &manifest.manifest_path.display().to_string(),
                    &self.staged.request,
                    kind,
                )
                .await?);
        }
        // A session another node ran, taken over here, has no row yet.
        if let Some(why) = again
            && store.get(&self.id).await?.is_some()
        {
            self.shared.metrics.session_restarted();
            return Ok(store
                .mark_restarting(&self.id, self.restart_count, Some(why))
                .await?);
        }
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
        let notes = Arc::new(crate::runtime::Notes::default());
        let launch = ScriptLaunch {
            tools,
            session_id: self.id.clone(),
            workdir: self.workdir.clone(),
            env: self.guest_env(),
            timeout: self.staged.timeout,
            memory_bytes: self.staged.memory_bytes,
            policy: Arc::clone(&self.staged.policy),
            log,
            notes: Some(Arc::clone(&notes)),
        };
        let mut trace = self.script_trace();
        if let Some(lifecycle) = lifecycle {
            return Box::pin(self.serve_tasks(prepared, lifecycle, launch, &notes, &mut trace))
                .await;
        }
        let end = Box::pin(
            self.shared
                .runtime
                .run_script(prepared, launch, self.stop.clone()),
        )
        .await
        .into();
        trace_notes(&notes, &mut trace).await;
        end
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
        driver_spec.policy = plan.driver_policy(&self.staged.policy);
        let eval = self.eval_env();
        let hook_spec = (!eval.is_empty()).then(|| {
            let mut spec = tool_spec.clone();
            spec.env.extend(eval);
            spec
        });
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
            hook_spec,
            capsule: self.staged.manifest.name.clone(),
            version: self.staged.manifest.version.clone(),
            route: self.name.clone(),
            session_id: self.id.clone(),
            url: self.capsule_url(),
            workdir: self.workdir.clone(),
            bookkeeping: self.bookkeeping.clone(),
            trace_max_bytes: self.shared.config.retention.trace.max_bytes,
            checkpoint_key: self.shared.checkpoint_key.clone(),
            stop: self.stop.clone(),
            idle_timeout: self.idle_timeout(),
            used_before,
            broker: Arc::clone(&self.shared.tasks),
            task_slot,
            shutdown: Arc::clone(&self.by_shutdown),
            inbox: std::sync::Mutex::new(inbox),
        };
        Box::pin(run.run()).await.into()
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
        let depth = lifecycle.inbox_depth()?;
        Some(
            self.shared
                .tasks
                .open_inbox(&self.id, &self.name, depth, lifecycle.same_context),
        )
    }

    /// How long a session without a task waits for one (`a2a.idle_timeout_secs`).
    fn idle_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.shared.config.a2a.idle_timeout_secs)
    }

    /// What its tools were opened to is closed again (unless another live
    /// session holds the same entries).
    async fn release_grants(&self) {
        let held = self.held.lock().ok().and_then(|mut h| h.take());
        if let Some(held) = held {
            let shared = Arc::clone(&self.shared);
            let _ = tokio::task::spawn_blocking(move || shared.grants.release(held)).await;
        }
    }

    async fn finish(&self, state: SessionState, error: Option<&str>) -> Option<Session> {
        if state == SessionState::Hibernated {
            return Box::pin(self.hibernate()).await;
        }
        // Handed to its next version (an upgrade): nothing of it ends but
        // this launch; the next records the session.
        if state == SessionState::Stopped && self.shared.tasks.handing_over(&self.id) {
            tracing::info!("this version has drained; the next takes over");
            self.release_grants().await;
            return None;
        }
        // Tasks still waiting for a session that ends fail visibly (on a
        // shutdown they stay queued for the restarted session).
        let inbox = self.inbox.lock().ok().and_then(|mut slot| slot.take());
        if self.by_shutdown.load(Ordering::Relaxed) {
            self.shared.tasks.detach_inbox(&self.id);
        } else {
            if let Some(inbox) = inbox {
                self.shared.tasks.close_inbox(&self.id, inbox).await;
            }
            if self.may_hold_tasks {
                let pending = self.shared.tasks.pending(&self.id).await;
                self.shared
                    .tasks
                    .fail_all(
                        pending.into_iter().map(|t| t.task_id),
                        crate::tasks::NEVER_RAN,
                    )
                    .await;
            }
        }
        let stop_reason = (state == SessionState::Stopped).then(|| {
            if self.by_shutdown.load(Ordering::Relaxed) {
                StopReason::Shutdown
            } else {
                StopReason::Operator
            }
        });
        let outcome = match state {
            SessionState::Completed => SessionOutcome::Completed,
            SessionState::Stopped => SessionOutcome::Stopped,
            SessionState::Interrupted => SessionOutcome::Interrupted,
            _ => SessionOutcome::Failed,
        };
        self.shared.metrics.outcome(outcome);
        tracing::info!(state = %state, error = error.unwrap_or(""), "session ended");
        self.release_grants().await;
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
