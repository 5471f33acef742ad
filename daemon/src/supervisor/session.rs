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
use crate::logs::LogSink;
use crate::metrics::Outcome;
use crate::runtime::{GuestFailure, ScriptLaunch};
use crate::staging::Staged;
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
        match self.register(resumed).await {
            Ok(session) => {
                let _ = reply.send(Ok(session));
            }
            Err(error) => {
                tracing::warn!(%error, "cannot record session");
                let _ = reply.send(Err(error));
                return None;
            }
        }
        let mut backoff = Backoff::new(self.shared.config.restart.clone());
        // A fresh row is written as `running`; restarts and resumes are not.
        let mut recorded_running = !resumed;
        let (state, error) = loop {
            let started = Instant::now();
            let end = self
                .run_once(std::mem::replace(&mut recorded_running, false))
                .await;
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
            if let Err(e) = self
                .shared
                .store
                .mark_restarting(&self.id, self.restart_count, error.as_deref())
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
        self.finish(state, error.as_deref()).await
    }

    /// Creates the bookkeeping dir and writes the row (or, when resuming after a
    /// daemon restart, records the restart on the existing row).
    async fn register(&self, resumed: bool) -> Result<Session, SupervisorError> {
        // The bookkeeping dir is the workdir, or inside it. It is made while the
        // row is written (a directory costs as much as a commit here); should it
        // fail, the run fails with the reason and the row says so.
        let dir = self.bookkeeping.clone();
        let mkdir = tokio::task::spawn_blocking(move || std::fs::create_dir_all(&dir));
        let (made, recorded) = tokio::join!(mkdir, self.record(resumed));
        match made {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "cannot create session directory"),
            Err(error) => tracing::warn!(%error, "session directory task failed"),
        }
        recorded
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
            })
            .await?)
    }

    async fn run_once(&self, recorded_running: bool) -> RunEnd {
        if self.stop.is_cancelled() {
            return RunEnd::Stopped;
        }
        let log = LogSink::new(
            &self.bookkeeping.join("logs"),
            self.shared.config.logs.max_bytes,
        );
        if !recorded_running && let Err(e) = self.shared.store.mark_running(&self.id).await {
            return RunEnd::Failed(format!("cannot record running state: {e}"));
        }
        self.shared.metrics.session_started();
        tracing::info!(sha256 = self.staged.prepared.sha256(), "running capsule");
        let launch = ScriptLaunch {
            session_id: self.id.clone(),
            workdir: self.workdir.clone(),
            env: self.guest_env(),
            timeout: self.staged.timeout,
            memory_bytes: self.staged.memory_bytes,
            policy: Arc::clone(&self.staged.policy),
            log,
        };
        let result = self
            .shared
            .runtime
            .run_script(&self.staged.prepared, launch, self.stop.clone())
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
            (
                "MURMUR_CAPSULE_URL".to_string(),
                format!("{}/a2a/{}", self.shared.a2a_base, self.name),
            ),
        ]);
        env
    }

    async fn finish(&self, state: SessionState, error: Option<&str>) -> Option<Session> {
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
