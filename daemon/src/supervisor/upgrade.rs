//! Upgrading a live session in place: the new version is staged whole
//! first (a failure changes nothing), then the old version takes no more
//! tasks, finishes those it runs (canceled, saying why, once the drain
//! time is up), and the new one starts under the same id and name. The
//! route and its inbox stay open throughout: a task accepted meanwhile
//! waits there and runs on the new version, as do tasks queued before the
//! switch that had not started. `--rollback` goes back to the version it
//! ran before, the same way.

use std::time::Duration;

use roost_wire::api::{Session, SessionVersion, StartRequest, UpgradeRequest};

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Live, Owner, OwnerCommand, Resume, Shared, Supervisor, SupervisorError};
use crate::ids::SessionId;
use crate::staging::{Staged, stage};

/// What a session's events and history say of an upgrade and a rollback.
pub(super) const UPGRADED: &str = "upgraded in place";
pub(super) const ROLLED_BACK: &str = "rolled back in place";

/// How long running tasks may take to finish on the old version by default.
const DEFAULT_DRAIN: Duration = Duration::from_secs(300);

/// An upgrade on its way: what starts once the old version has ended.
pub(super) struct Pending {
    pub(super) staged: Box<Staged>,
    pub(super) why: &'static str,
    pub(super) restart_count: u32,
    pub(super) reply: tokio::sync::oneshot::Sender<Result<Session, SupervisorError>>,
    /// Cancelled when the old version has ended (its drain timer stops).
    pub(super) retired: tokio_util::sync::CancellationToken,
}

impl Pending {
    /// The next version starts under the session's id and `name`; the
    /// launch answers the upgrade.
    pub(super) fn launch(self, owner: &mut Owner, id: &SessionId, name: String) {
        let resume = Resume {
            id: id.clone(),
            name,
            restart_count: self.restart_count,
            why: self.why,
            arriving: None,
        };
        owner.launch(*self.staged, Some(resume), self.reply);
    }
}

impl Supervisor {
    /// Upgrades (or rolls back) live session `id_or_name`; answers its
    /// record once the new version is recorded and takes the route's tasks.
    pub async fn upgrade(
        &self,
        id_or_name: &str,
        request: UpgradeRequest,
    ) -> Result<Session, SupervisorError> {
        let id = self
            .live_id(id_or_name)
            .await?
            .ok_or_else(|| SupervisorError::NotFound(id_or_name.to_string()))?;
        let current = self.get(&id).await?;
        let stored = self
            .shared
            .store
            .restartable(&id)
            .await?
            .ok_or_else(|| SupervisorError::NotFound(id_or_name.to_string()))?;
        let (next, why) = match (&request.path, &request.version, request.rollback) {
            (Some(path), None, false) => (
                StartRequest {
                    path: path.clone(),
                    ..stored.request
                },
                UPGRADED,
            ),
            (None, Some(wanted), false) => {
                let versions = self.shared.store.session_versions(&id).await?;
                let Some((_, request)) = versions
                    .iter()
                    .rev()
                    .find(|(v, _)| format!("{}@{}", v.capsule, v.version) == *wanted)
                else {
                    return Err(SupervisorError::Upgrade(format!(
                        "session '{}' has not run {wanted} (`roostctl versions {}` lists the \
                         versions it has run); to install another, give its capsule directory",
                        current.name, current.name
                    )));
                };
                (request.clone(), UPGRADED)
            }
            (None, None, true) => {
                let versions = self.shared.store.session_versions(&id).await?;
                let Some((earlier, request)) = versions.len().checked_sub(2).map(|i| &versions[i])
                else {
                    return Err(SupervisorError::Upgrade(format!(
                        "session '{}' has run no earlier version to roll back to",
                        current.name
                    )));
                };
                tracing::info!(session_id = %id, version = %earlier.version, "rolling back");
                (request.clone(), ROLLED_BACK)
            }
            (None, None, false) => {
                return Err(SupervisorError::Upgrade(
                    "give the new version's capsule directory, a name@version the session has \
                     run, or --rollback"
                        .into(),
                ));
            }
            _ => {
                return Err(SupervisorError::Upgrade(
                    "give one of: the new version's capsule directory, a name@version the \
                     session has run, --rollback"
                        .into(),
                ));
            }
        };
        let staged = stage(&self.shared.stage_ctx(), next).await?;
        let manifest = &staged.manifest;
        if !request.force && !request.rollback {
            if manifest.name != current.capsule {
                return Err(SupervisorError::Upgrade(format!(
                    "{} is capsule '{}', and session '{}' runs '{}': an upgrade keeps the \
                     capsule (--force to replace it)",
                    manifest.manifest_path.display(),
                    manifest.name,
                    current.name,
                    current.capsule
                )));
            }
            if !newer(&manifest.version, &current.version) {
                return Err(SupervisorError::Upgrade(format!(
                    "version {} is not newer than {}, which session '{}' runs (--force to \
                     install it anyway)",
                    manifest.version, current.version, current.name
                )));
            }
        }
        let drain = request
            .drain_timeout_secs
            .map_or(DEFAULT_DRAIN, Duration::from_secs);
        tracing::info!(session_id = %id, from = %current.version, to = %manifest.version, why, "upgrading");
        let restart_count = current.restart_count;
        self.ask(|reply| OwnerCommand::Upgrade {
            id,
            drain,
            pending: Box::new(Pending {
                staged: Box::new(staged),
                why,
                restart_count,
                reply,
                retired: tokio_util::sync::CancellationToken::new(),
            }),
        })
        .await
    }

    /// The versions a session has run, oldest first; the last is current.
    pub async fn versions(&self, id_or_name: &str) -> Result<Vec<SessionVersion>, SupervisorError> {
        let session = self.get(id_or_name).await?;
        let mut versions: Vec<SessionVersion> = self
            .shared
            .store
            .session_versions(&session.id)
            .await?
            .into_iter()
            .map(|(v, _)| v)
            .collect();
        if versions.is_empty() {
            versions.push(SessionVersion {
                capsule: session.capsule,
                version: session.version,
                manifest: session.manifest,
                since: session.created_at,
                why: "start".into(),
            });
        }
        Ok(versions)
    }
}

impl Owner {
    /// Starts the switch: the live version takes no more tasks and its
    /// inbox is kept for the next; when the drain time is up, what still
    /// runs is canceled (then, as a backstop, the old version is stopped).
    pub(super) fn upgrade(&mut self, id: &SessionId, drain: Duration, pending: Box<Pending>) {
        if self.asleep.contains_key(id) {
            return self.upgrade_asleep(id, *pending);
        }
        let Some(live) = self.live.get_mut(id) else {
            let _ = pending
                .reply
                .send(Err(SupervisorError::NotFound(id.to_string())));
            return;
        };
        if live.upgrade.is_some() {
            let _ = pending
                .reply
                .send(Err(SupervisorError::UpgradeInProgress(live.name.clone())));
            return;
        }
        // Its end is as at a shutdown: nothing queued fails.
        live.by_shutdown.store(true, Ordering::Relaxed);
        let stop = live.stop.clone();
        let retired = pending.retired.clone();
        live.upgrade = Some(pending);
        if !self.shared.tasks.begin_handover(id) {
            // No inbox (it takes no A2A tasks): it stops, the next starts.
            stop.cancel();
            return;
        }
        let broker = Arc::clone(&self.shared.tasks);
        let id = id.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = retired.cancelled() => {}
                () = tokio::time::sleep(drain) => {
                    let reason = drained_out(&id, drain);
                    let canceled = broker.cancel_running_of(&id, &reason).await;
                    tracing::warn!(session_id = %id, canceled, "upgrade drain time up");
                    tokio::select! {
                        () = retired.cancelled() => {}
                        () = tokio::time::sleep(Duration::from_secs(5)) => stop.cancel(),
                    }
                }
            }
        });
    }

    /// The old version has ended: the next starts under the same id and
    /// name (the route never left the table), and answers the upgrade.
    pub(super) fn next_version(&mut self, id: &SessionId, live: Live, pending: Pending) {
        pending.retired.cancel();
        self.names.remove(&live.name);
        pending.launch(self, id, live.name.clone());
        match self.live.get_mut(id) {
            Some(next) => {
                // A stop asked during the switch stops the new version.
                if !live.waiting_stop.is_empty() {
                    next.stop.cancel();
                }
                next.waiting_stop = live.waiting_stop;
            }
            None => {
                // Not launched (roostd is shutting down): the session ends.
                self.shared.remove_route(id, &live.name);
                let broker = Arc::clone(&self.shared.tasks);
                let id = id.clone();
                tokio::spawn(async move { broker.abandon_handover(&id).await });
                for waiter in live.waiting_stop {
                    let _ = waiter.send(Err(SupervisorError::ShuttingDown));
                }
            }
        }
    }
}

/// A stop during an upgrade's drain: the upgrade is answered that it was
/// called off, and the session ends as a stop ends it.
pub(super) fn call_off(shared: &Arc<Shared>, live: &Live, pending: Pending) {
    pending.retired.cancel();
    live.by_shutdown.store(false, Ordering::Relaxed);
    let _ = pending.reply.send(Err(SupervisorError::Upgrade(format!(
        "session '{}' was stopped during its upgrade; the upgrade was called off",
        live.name
    ))));
    let broker = Arc::clone(&shared.tasks);
    let id = live_id(shared, &live.name);
    tokio::spawn(async move {
        if let Some(id) = id {
            broker.abandon_handover(&id).await;
        }
    });
}

fn live_id(shared: &Shared, name: &str) -> Option<String> {
    shared.routes.get(name).map(|r| r.id.to_string())
}

/// The cancel reason of a task the drain time ran out on.
pub(super) fn drained_out(id: &SessionId, drain: Duration) -> String {
    format!(
        "canceled: session {id} was upgraded and this task, running on the old version, did \
         not finish within the drain timeout ({} s)",
        drain.as_secs()
    )
}

/// `a` is a later semantic version than `b` (pre-releases before their
/// release; build metadata ignored).
fn newer(a: &str, b: &str) -> bool {
    fn parts(v: &str) -> (Vec<u64>, Option<&str>) {
        let v = v.split('+').next().unwrap_or_default();
        let (core, pre) = match v.split_once('-') {
            Some((core, pre)) => (core, Some(pre)),
            None => (v, None),
        };
        (
            core.split('.').map(|n| n.parse().unwrap_or(0)).collect(),
            pre,
        )
    }
    let (ca, pa) = parts(a);
    let (cb, pb) = parts(b);
    match ca.cmp(&cb) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal => match (pa, pb) {
            (None, Some(_)) => true,
            (Some(x), Some(y)) => x > y,
            _ => false,
        },
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn versions_compare_as_semver() {
        use super::newer;
        assert!(newer("0.2.0", "0.1.9"));
        assert!(newer("1.10.0", "1.9.3"));
        assert!(newer("1.0.0", "1.0.0-rc.1"));
        assert!(!newer("1.0.0", "1.0.0"));
        assert!(!newer("0.9.0", "1.0.0"));
        assert!(!newer("1.0.0-rc.1", "1.0.0"));
    }
}
