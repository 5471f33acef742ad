//! The owner task: the one place the live-session table (and the names and
//! hibernated sessions beside it) changes. It takes `OwnerCommand`s in
//! order, launches each session's task, and hears when one ends.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use roost_wire::api::Session;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{
    Ended, Live, OwnerCommand, Resume, Shared, SupervisorError, hibernate, session, upgrade,
};
use crate::ids::SessionId;
use crate::staging::{Staged, session_dirs};

pub(super) struct Owner {
    pub(super) shared: Arc<Shared>,
    pub(super) tx: mpsc::Sender<OwnerCommand>,
    pub(super) ended: broadcast::Sender<Ended>,
    pub(super) live: HashMap<SessionId, Live>,
    /// Hibernated sessions (`hibernate.rs`) by id: their names (kept in
    /// `names` too) and routes stay taken.
    pub(super) asleep: HashMap<SessionId, String>,
    /// Wakes asked while the session's launch was still ending hibernated.
    pub(super) early_wakes: HashMap<SessionId, hibernate::EarlyWake>,
    pub(super) names: HashMap<String, SessionId>,
    pub(super) shutting_down: bool,
}

impl Owner {
    pub(super) async fn run(mut self, mut rx: mpsc::Receiver<OwnerCommand>) {
        let mut shutdown_reply: Option<oneshot::Sender<()>> = None;
        let mut grace_deadline: Option<tokio::time::Instant> = None;
        loop {
            let command = match grace_deadline {
                Some(deadline) => match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(command) => command,
                    Err(_) => {
                        tracing::warn!(remaining = self.live.len(), "shutdown grace period over");
                        break;
                    }
                },
                None => rx.recv().await,
            };
            let Some(command) = command else { break };
            match command {
                OwnerCommand::Launch {
                    staged,
                    resume,
                    reply,
                } => self.launch(*staged, resume, reply),
                OwnerCommand::Stop { id_or_name, reply } => self.stop(&id_or_name, reply).await,
                OwnerCommand::Drain { id, within, reply } => self.drain(&id, within, reply),
                OwnerCommand::Upgrade { id, drain, pending } => self.upgrade(&id, drain, pending),
                OwnerCommand::Resolve { id_or_name, reply } => {
                    let _ = reply.send(self.resolve(&id_or_name));
                }
                OwnerCommand::Ended {
                    id,
                    record,
                    hibernated,
                } => match hibernated {
                    true => self.hibernated(&id, record),
                    false => self.ended(&id, record),
                },
                OwnerCommand::Asleep { sessions, reply } => {
                    for (id, name) in sessions {
                        self.names.insert(name.clone(), id.clone());
                        self.asleep.insert(id, name);
                    }
                    self.shared.metrics.set_hibernated(self.asleep.len());
                    let _ = reply.send(());
                }
                OwnerCommand::Shutdown { grace, reply } => {
                    self.shutting_down = true;
                    for live in self.live.values() {
                        live.by_shutdown.store(true, Ordering::Relaxed);
                        live.stop.cancel();
                    }
                    shutdown_reply = Some(reply);
                    grace_deadline = Some(tokio::time::Instant::now() + grace);
                }
            }
            if self.shutting_down && self.live.is_empty() {
                break;
            }
        }
        if let Some(reply) = shutdown_reply {
            let _ = reply.send(());
        }
    }

    /// Reserves the name and spawns the session task, which writes the row and
    /// answers `reply` itself: the owner never waits on the database here.
    pub(super) fn launch(
        &mut self,
        staged: Staged,
        resume: Option<Resume>,
        reply: oneshot::Sender<Result<Session, SupervisorError>>,
    ) {
        if self.shutting_down {
            let _ = reply.send(Err(SupervisorError::ShuttingDown));
            return;
        }
        let mut resume = resume;
        let arriving = resume.as_mut().and_then(|r| r.arriving.take());
        let (id, name, restart_count) = match &resume {
            Some(r) => (r.id.clone(), r.name.clone(), r.restart_count),
            None => {
                let id = SessionId::generate();
                match self.pick_name(&staged, &id) {
                    Ok(name) => (id, name, 0),
                    Err(e) => {
                        let _ = reply.send(Err(e));
                        return;
                    }
                }
            }
        };
        // A hibernated session launched again (woken, upgraded) is no
        // longer asleep. A wake for one whose launch is still ending
        // hibernated waits for that end; for one that is neither, it is
        // stale.
        let mut early = None;
        if let Some(r) = &resume {
            if self.asleep.remove(&r.id).is_some() {
                self.names.remove(&r.name);
                self.shared.metrics.set_hibernated(self.asleep.len());
            } else if r.why == hibernate::WOKEN {
                // Live and not going to sleep (woken already, or upgraded
                // meanwhile): stale too.
                if !self.live.contains_key(&r.id) || !self.shared.tasks.hibernating(&r.id) {
                    let _ = reply.send(Err(SupervisorError::NotFound(r.id.to_string())));
                    return;
                }
                early = Some(r.id.clone());
            }
        }
        if let Some(id) = early {
            let wake = hibernate::EarlyWake {
                staged: Box::new(staged),
                resume,
                reply,
            };
            self.early_wakes.insert(id, wake);
            return;
        }
        if self.names.contains_key(&name) {
            let _ = reply.send(Err(SupervisorError::NameInUse(name)));
            return;
        }
        let (workdir, bookkeeping) = session_dirs(
            &self.shared.config.state_dir,
            staged.user_workdir.as_deref(),
            &id,
        );
        let stop = CancellationToken::new();
        let by_shutdown = Arc::new(AtomicBool::new(false));
        let hibernated = Arc::new(AtomicBool::new(false));
        self.names.insert(name.clone(), id.clone());
        self.live.insert(
            id.clone(),
            Live {
                name: name.clone(),
                stop: stop.clone(),
                by_shutdown: Arc::clone(&by_shutdown),
                waiting_stop: Vec::new(),
                upgrade: None,
            },
        );
        self.shared
            .live_count
            .store(self.live.len() as u64, Ordering::Relaxed);
        let span = tracing::info_span!(
            "session",
            session_id = %id,
            capsule = %staged.manifest.name,
            name = %name
        );
        let staged_takes_tasks = staged.program.lifecycle().is_some();
        let task = session::SessionTask {
            shared: Arc::clone(&self.shared),
            id: id.clone(),
            name,
            staged,
            workdir,
            bookkeeping,
            stop,
            by_shutdown,
            restart_count,
            artifacts: None,
            inbox: std::sync::Mutex::new(None),
            held: std::sync::Mutex::new(None),
            arriving: std::sync::Mutex::new(arriving),
            hibernated: Arc::clone(&hibernated),
            may_hold_tasks: resume.is_some() || staged_takes_tasks,
        };
        let tx = self.tx.clone();
        let again = resume.as_ref().map(|r| r.why);
        tokio::spawn(
            async move {
                let record = task.run(again, reply).await;
                let record = record.map(Box::new);
                let hibernated = hibernated.load(Ordering::Relaxed);
                let _ = tx
                    .send(OwnerCommand::Ended {
                        id,
                        record,
                        hibernated,
                    })
                    .await;
            }
            .instrument(span),
        );
    }

    /// The requested name, else the capsule name, else the capsule name with a
    /// suffix from the session id when a live session already has it.
    fn pick_name(&self, staged: &Staged, id: &str) -> Result<String, SupervisorError> {
        if let Some(name) = &staged.request.name {
            if self.names.contains_key(name) {
                return Err(SupervisorError::NameInUse(name.clone()));
            }
            return Ok(name.clone());
        }
        let base = &staged.manifest.name;
        if !self.names.contains_key(base) {
            return Ok(base.clone());
        }
        let suffix = &id[id.len() - 8..];
        let trimmed: String = base.chars().take(63 - 9).collect();
        Ok(format!("{trimmed}-{suffix}"))
    }

    /// The id of the live session with this id or name.
    fn resolve(&self, id_or_name: &str) -> Option<SessionId> {
        if let Some((id, _)) = self.live.get_key_value(id_or_name) {
            Some(id.clone())
        } else if let Some((id, _)) = self.asleep.get_key_value(id_or_name) {
            Some(id.clone())
        } else {
            self.names.get(id_or_name).cloned()
        }
    }

    async fn stop(
        &mut self,
        id_or_name: &str,
        reply: oneshot::Sender<Result<Session, SupervisorError>>,
    ) {
        if let Some(id) = self.resolve(id_or_name)
            && self.asleep.contains_key(&id)
        {
            return self.stop_asleep(&id, vec![reply]);
        }
        match self
            .resolve(id_or_name)
            .and_then(|id| self.live.get_mut(&id))
        {
            Some(live) => {
                // A stop during an upgrade's drain stops the session: the
                // upgrade is called off.
                if let Some(pending) = live.upgrade.take() {
                    upgrade::call_off(&self.shared, live, *pending);
                }
                live.stop.cancel();
                live.waiting_stop.push(reply);
            }
            None => {
                // The owner task never awaits the database: the record of a
                // session that is not live is read beside it.
                let store = self.shared.store.clone();
                let id_or_name = id_or_name.to_string();
                tokio::spawn(async move {
                    let result = match store.get(&id_or_name).await {
                        Ok(Some(session)) => Ok(session),
                        Ok(None) => Err(SupervisorError::NotFound(id_or_name)),
                        Err(e) => Err(e.into()),
                    };
                    let _ = reply.send(result);
                });
            }
        }
    }

    fn drain(
        &mut self,
        id: &SessionId,
        within: Duration,
        reply: oneshot::Sender<Result<Session, SupervisorError>>,
    ) {
        let Some(live) = self.live.get_mut(id) else {
            let _ = reply.send(Err(SupervisorError::NotFound(id.to_string())));
            return;
        };
        live.by_shutdown.store(true, Ordering::Relaxed);
        live.waiting_stop.push(reply);
        let stop = live.stop.clone();
        if !self.shared.tasks.quiesce(id) {
            stop.cancel();
            return;
        }
        tokio::spawn(async move {
            tokio::time::sleep(within).await;
            stop.cancel();
        });
    }

    /// Takes a launch that ended out of the live table (and the counts).
    pub(super) fn take_live(&mut self, id: &SessionId) -> Option<Live> {
        let live = self.live.remove(id)?;
        self.shared
            .live_count
            .store(self.live.len() as u64, Ordering::Relaxed);
        self.shared.launches_ended.fetch_add(1, Ordering::Relaxed);
        Some(live)
    }

    fn ended(&mut self, id: &SessionId, record: Option<Box<Session>>) {
        let Some(mut live) = self.take_live(id) else {
            return;
        };
        if let Some(wake) = self.early_wakes.remove(id) {
            let _ = wake
                .reply
                .send(Err(SupervisorError::NotFound(id.to_string())));
        }
        if let Some(pending) = live.upgrade.take() {
            return self.next_version(id, live, *pending);
        }
        self.shared.remove_route(id, &live.name);
        if self.names.get(&live.name).is_some_and(|owner| owner == id) {
            self.names.remove(&live.name);
        }
        let record = record.map(|r| Arc::new(*r));
        super::tell_ended(&self.ended, id.clone(), record, live.waiting_stop);
    }
}
