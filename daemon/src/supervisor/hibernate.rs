//! Hibernation (`lifecycle.hibernate_after`): a session idle that long ends
//! its launch and gives back everything but its route — its task, instance
//! state, driver and buffers; its inbox is parked in the broker, its row
//! says `hibernated`, its name stays taken. The first task to arrive wakes
//! it: staged again from its stored start request and launched under the
//! same id and name, taking the parked inbox with what waits in it. A
//! restart of roostd parks the inboxes again without waking anyone.

use std::sync::Arc;

use roost_wire::api::{Session, SessionState};
use tokio::sync::oneshot;

use super::{Owner, OwnerCommand, Resume, Supervisor, SupervisorError};
use crate::ids::SessionId;
use crate::staging::stage;
use crate::store::StopReason;

pub(super) use super::session::WOKEN;

/// A wake staged before the launch it wakes had finished hibernating:
/// launched when it has.
pub(super) struct EarlyWake {
    pub(super) staged: Box<crate::staging::Staged>,
    pub(super) resume: Option<Resume>,
    pub(super) reply: oneshot::Sender<Result<Session, SupervisorError>>,
}

impl Supervisor {
    /// Listens for the broker's wakes from now on.
    pub(super) fn serve_wakes(&self) {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        self.shared.tasks.set_waker(tx);
        let supervisor = self.clone();
        tokio::spawn(async move {
            while let Some(id) = rx.recv().await {
                let supervisor = supervisor.clone();
                tokio::spawn(async move { supervisor.wake(id).await });
            }
        });
    }

    /// Wakes hibernated session `id`: staged from its stored start request
    /// and launched under its id and name. If it does not stage, the tasks
    /// waiting for it fail saying why, and it stays hibernated.
    async fn wake(&self, id: String) {
        let item = match self.shared.store.restartable(&id).await {
            Ok(Some(item)) => item,
            Ok(None) => {
                return self
                    .shared
                    .tasks
                    .wake_failed(&id, "its session is gone")
                    .await;
            }
            Err(error) => {
                let why = format!("failed: its session could not be read to wake it: {error}");
                return self.shared.tasks.wake_failed(&id, &why).await;
            }
        };
        tracing::info!(session_id = %id, name = %item.name, "waking");
        let staged = match stage(&self.shared.stage_ctx(), item.request).await {
            Ok(staged) => staged,
            Err(error) => {
                let why = format!(
                    "failed: session '{}' did not wake from hibernation: {error}",
                    item.name
                );
                return self.shared.tasks.wake_failed(&id, &why).await;
            }
        };
        let resume = Resume {
            id: id.clone().into(),
            name: item.name.clone(),
            restart_count: item.restart_count,
            why: WOKEN,
            arriving: None,
        };
        let launched = self
            .ask(|reply| OwnerCommand::Launch {
                staged: Box::new(staged),
                resume: Some(resume),
                reply,
            })
            .await;
        match launched {
            Ok(_) => {}
            // Not asleep any more (stopped or upgraded meanwhile), or
            // roostd is stopping (its tasks stay stored for the restart).
            Err(SupervisorError::NotFound(_) | SupervisorError::ShuttingDown) => {}
            Err(error) => {
                let why = format!(
                    "failed: session '{}' did not wake from hibernation: {error}",
                    item.name
                );
                self.shared.tasks.wake_failed(&id, &why).await;
            }
        }
    }

    /// At start-up, before READY: every hibernated session's route and
    /// inbox are open again, nothing of them staged; those with tasks
    /// stored for them are woken. How many there are.
    pub async fn restore_hibernated(&self) -> Result<usize, SupervisorError> {
        let asleep = self.shared.store.hibernated().await?;
        let mut sessions = Vec::with_capacity(asleep.len());
        for session in asleep {
            let id = SessionId::from(session.id);
            self.shared.tasks.open_asleep(
                &id,
                &session.name,
                session.depth as usize,
                crate::manifest::SameContext::parse(&session.same_context),
            );
            self.shared.add_route(&id, &session.name);
            sessions.push((id, session.name));
        }
        let count = sessions.len();
        let (reply, done) = oneshot::channel();
        self.tx
            .send(OwnerCommand::Asleep { sessions, reply })
            .await
            .map_err(|_| SupervisorError::Gone)?;
        done.await.map_err(|_| SupervisorError::Gone)?;
        for id in self.shared.store.hibernated_with_tasks().await? {
            self.shared.tasks.wake_if_asleep(&id);
        }
        Ok(count)
    }
}

impl Owner {
    /// A launch ended hibernated: the session stays, asleep. An upgrade
    /// asked meanwhile starts its next version; a stop asked meanwhile
    /// stops it.
    pub(super) fn hibernated(&mut self, id: &SessionId, record: Option<Box<Session>>) {
        let Some(mut live) = self.take_live(id) else {
            return;
        };
        let mut wake = self.early_wakes.remove(id);
        // An upgrade or a stop asked meanwhile wins: the inbox goes to the
        // next version, or closes (the waker then leaves its tasks be).
        if (live.upgrade.is_some() || !live.waiting_stop.is_empty())
            && let Some(wake) = wake.take()
        {
            let _ = wake
                .reply
                .send(Err(SupervisorError::NotFound(id.to_string())));
        }
        if let Some(pending) = live.upgrade.take() {
            return self.next_version(id, live, *pending);
        }
        tracing::debug!(session_id = %id, state = ?record.map(|r| r.state), "asleep");
        self.asleep.insert(id.clone(), live.name);
        self.shared.metrics.set_hibernated(self.asleep.len());
        if !live.waiting_stop.is_empty() {
            return self.stop_asleep(id, live.waiting_stop);
        }
        // A task arrived as it went to sleep: it wakes at once.
        if let Some(wake) = wake {
            self.launch(*wake.staged, wake.resume, wake.reply);
        }
    }

    /// Stops a hibernated session: its route goes, the tasks waiting in
    /// its inbox fail, its row ends `stopped`; `waiters` get the record.
    pub(super) fn stop_asleep(
        &mut self,
        id: &SessionId,
        waiters: Vec<oneshot::Sender<Result<Session, SupervisorError>>>,
    ) {
        let Some(name) = self.asleep.remove(id) else {
            return;
        };
        if self.names.get(&name).is_some_and(|owner| owner == id) {
            self.names.remove(&name);
        }
        self.shared.remove_route(id, &name);
        self.shared.metrics.set_hibernated(self.asleep.len());
        let shared = Arc::clone(&self.shared);
        let ended = self.ended.clone();
        let id = id.clone();
        tokio::spawn(async move {
            shared.tasks.close_asleep(&id).await;
            let record = shared
                .store
                .mark_ended(&id, SessionState::Stopped, None, Some(StopReason::Operator))
                .await;
            shared
                .metrics
                .outcome(crate::metrics::SessionOutcome::Stopped);
            tracing::info!(session_id = %id, "hibernated session stopped");
            let record = match record {
                Ok(session) => Some(Arc::new(session)),
                Err(error) => {
                    tracing::error!(session_id = %id, %error, "cannot record session end");
                    None
                }
            };
            super::tell_ended(&ended, id, record, waiters);
        });
    }

    /// An upgrade of a hibernated session: its next version starts at
    /// once (nothing runs to drain) and takes the parked inbox.
    pub(super) fn upgrade_asleep(&mut self, id: &SessionId, pending: super::upgrade::Pending) {
        let name = self.asleep.get(id).cloned().unwrap_or_default();
        pending.launch(self, id, name);
    }
}
