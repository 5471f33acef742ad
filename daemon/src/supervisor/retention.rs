//! Removing ended sessions: `roostctl rm` (one session, with everything it
//! recorded), `roostctl prune` (everything ended before a time) and the
//! background retention loop (`retention:` in the config).

use std::path::Path;
use std::time::{Duration, SystemTime};

use roost_wire::api::{PruneReport, Session};
use tokio_util::sync::CancellationToken;

use super::{Supervisor, SupervisorError};
use crate::config::Retention;
use crate::staging::session_dirs;

/// Sessions read per round of pruning.
const SESSIONS_PER_ROUND: u32 = 100;

/// What to prune.
#[derive(Debug, Clone, Default)]
pub struct PruneRule {
    /// Sessions that ended before this (RFC 3339).
    pub sessions_ended_before: Option<String>,
    /// Sessions beyond the newest this many ended ones.
    pub keep_sessions: Option<u64>,
    /// A2A tasks that ended before this.
    pub tasks_ended_before: Option<String>,
    /// A2A tasks beyond the newest this many ended ones.
    pub keep_tasks: Option<u64>,
    /// Only say what would go.
    pub dry_run: bool,
}

/// RFC 3339 for `age` ago.
pub fn ago(age: Duration) -> String {
    humantime::format_rfc3339_millis(SystemTime::now() - age).to_string()
}

impl Supervisor {
    /// Deletes a session that is not live, with its events, tasks (A2A ones
    /// included) and directories; with `force` a live one is stopped first.
    pub async fn remove(&self, id_or_name: &str, force: bool) -> Result<Session, SupervisorError> {
        if self.live_id(id_or_name).await?.is_some() {
            if !force {
                return Err(SupervisorError::Live(id_or_name.to_string()));
            }
            self.stop(id_or_name).await?;
        }
        let session = self.get(id_or_name).await?;
        if !self.shared.store.delete_session(&session.id).await? {
            // It went live again (a restart) between the two.
            return Err(SupervisorError::Live(id_or_name.to_string()));
        }
        self.remove_dirs(&session).await;
        self.forget_route(&session).await;
        tracing::info!(session_id = %session.id, name = %session.name, "session removed");
        Ok(session)
    }

    /// Deletes ended A2A tasks and then ended sessions per `rule` (a session
    /// with an A2A task that is kept is kept too); returns what went (or
    /// would go, with `dry_run`).
    pub async fn prune(&self, rule: &PruneRule) -> Result<PruneReport, SupervisorError> {
        let report = self.prune_rows(rule).await?;
        if !rule.dry_run {
            self.prune_uploads().await?;
        }
        Ok(report)
    }

    /// Uploaded capsules (`<state>/uploads/<sha256>/`) no session was
    /// started from, or whose sessions are all gone, once they are an hour
    /// old (a fresh upload is about to be started).
    async fn prune_uploads(&self) -> Result<(), SupervisorError> {
        let uploads = self.shared.config.state_dir.join("uploads");
        if !uploads.is_dir() {
            return Ok(());
        }
        let used: std::collections::HashSet<String> = self
            .shared
            .store
            .list(true)
            .await?
            .into_iter()
            .filter_map(|s| {
                Path::new(&s.manifest)
                    .strip_prefix(&uploads)
                    .ok()
                    .and_then(|rest| rest.iter().next())
                    .map(|dir| dir.to_string_lossy().into_owned())
            })
            .collect();
        let removed = tokio::task::spawn_blocking(move || {
            let hour_ago = SystemTime::now() - Duration::from_secs(3600);
            let mut removed = 0;
            for entry in std::fs::read_dir(&uploads).into_iter().flatten().flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let old = entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t < hour_ago);
                if old && !used.contains(&name) && std::fs::remove_dir_all(entry.path()).is_ok() {
                    removed += 1;
                }
            }
            removed
        })
        .await
        .unwrap_or(0);
        if removed > 0 {
            tracing::info!(removed, "uploaded capsules no session uses were removed");
        }
        Ok(())
    }

    async fn prune_rows(&self, rule: &PruneRule) -> Result<PruneReport, SupervisorError> {
        let store = &self.shared.store;
        let mut report = PruneReport {
            dry_run: rule.dry_run,
            ..PruneReport::default()
        };
        if rule.dry_run {
            if let Some(before) = &rule.tasks_ended_before {
                report.tasks = store.count_ended_a2a_tasks(before).await?;
            }
            report.sessions = store
                .prunable_sessions(
                    rule.sessions_ended_before.as_deref(),
                    rule.keep_sessions,
                    rule.tasks_ended_before.as_deref(),
                    u32::MAX,
                )
                .await?;
            return Ok(report);
        }
        if rule.tasks_ended_before.is_some() || rule.keep_tasks.is_some() {
            report.tasks = store
                .prune_a2a_tasks(rule.tasks_ended_before.as_deref(), rule.keep_tasks)
                .await?;
        }
        if rule.sessions_ended_before.is_none() && rule.keep_sessions.is_none() {
            return Ok(report);
        }
        loop {
            let batch = store
                .prunable_sessions(
                    rule.sessions_ended_before.as_deref(),
                    rule.keep_sessions,
                    None,
                    SESSIONS_PER_ROUND,
                )
                .await?;
            let full = batch.len() == SESSIONS_PER_ROUND as usize;
            let mut removed = 0;
            for session in batch {
                if self.live_id(&session.id).await?.is_some()
                    || !store.delete_session(&session.id).await?
                {
                    continue;
                }
                self.remove_dirs(&session).await;
                self.forget_route(&session).await;
                report.sessions.push(session);
                removed += 1;
            }
            if !full || removed == 0 {
                return Ok(report);
            }
        }
    }

    /// Prunes per `retention` every `interval_secs` until `stop`; a new
    /// `retention` (roostd reloading its config) applies from the next round,
    /// which starts a new interval.
    pub async fn retention_loop(
        self,
        mut settings: tokio::sync::watch::Receiver<Retention>,
        stop: CancellationToken,
    ) {
        let age = |secs: u64| (secs > 0).then(|| ago(Duration::from_secs(secs)));
        let count = |n: u64| (n > 0).then_some(n);
        loop {
            let every = Duration::from_secs(settings.borrow().interval_secs.max(1));
            tokio::select! {
                () = stop.cancelled() => return,
                changed = settings.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    continue;
                }
                () = tokio::time::sleep(every) => {}
            }
            let retention = settings.borrow().clone();
            let rule = PruneRule {
                sessions_ended_before: age(retention.sessions.max_age_secs),
                keep_sessions: count(retention.sessions.max_count),
                tasks_ended_before: age(retention.tasks.max_age_secs),
                keep_tasks: count(retention.tasks.max_count),
                dry_run: false,
            };
            match self.prune(&rule).await {
                Ok(report) if report.tasks == 0 && report.sessions.is_empty() => {}
                Ok(report) => tracing::info!(
                    tasks = report.tasks,
                    sessions = report.sessions.len(),
                    "ended A2A tasks and sessions pruned (retention)"
                ),
                Err(error) => tracing::warn!(%error, "cannot prune ended tasks and sessions"),
            }
        }
    }

    /// In a cluster, the removed session's route record goes with it.
    async fn forget_route(&self, session: &Session) {
        if let Some(claims) = &self.shared.claims {
            let id = crate::ids::SessionId::from(session.id.clone());
            claims.forget(&session.name, &id).await;
        }
    }

    /// Removes the directories roostd made for a session: `<state>/sessions/<id>/`,
    /// or `<workdir>/.murmur/<id>/` (never an operator's workdir itself). A
    /// failure is logged: the record is gone either way.
    async fn remove_dirs(&self, session: &Session) {
        let state_dir = self.shared.config.state_dir.clone();
        let (workdir, bookkeeping) = (
            Path::new(&session.workdir).to_path_buf(),
            Path::new(&session.bookkeeping_dir).to_path_buf(),
        );
        let id = session.id.clone();
        let removed = tokio::task::spawn_blocking(move || {
            let (own, _) = session_dirs(&state_dir, None, &id);
            if workdir == own {
                crate::fsx::remove_tree(&state_dir.join("sessions"), &own)
            } else if bookkeeping == session_dirs(&state_dir, Some(&workdir), &id).1 {
                crate::fsx::remove_tree(&workdir, &bookkeeping)
            } else {
                Ok(())
            }
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        if let Err(error) = removed {
            tracing::warn!(session_id = %session.id, %error, "cannot remove the session's directories");
        }
    }
}
