//! The supervisor: sole owner of the live-session table. Handlers send it
//! [`OwnerCommand`]s and get replies on oneshots; each session runs as its own task
//! ([`session`]) and reports back when it has ended for good.

mod backoff;
mod grants;
mod hibernate;
mod resume;
mod retention;
mod routing;
mod session;
mod shared;
mod start;
mod upgrade;

pub use retention::{PruneRule, ago};
pub use shared::{Routes, Shared, SharedParts};

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use roost_wire::api::Session;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::ids::SessionId;
use crate::staging::{StageError, Staged, session_dirs};
use crate::store::StoreError;

/// What the supervisor can refuse; the API maps these to statuses.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error(transparent)]
    Stage(#[from] StageError),
    #[error("no session has id or name '{0}'; `roostctl list --all` shows them")]
    NotFound(String),
    #[error("name '{0}' is already used by a live session; stop it or choose another --name")]
    NameInUse(String),
    #[error("session '{0}' is live; stop it first, or remove it with --force (which stops it)")]
    Live(String),
    #[error(transparent)]
    Claim(#[from] crate::a2a::routing::ClaimError),
    #[error("roostd is shutting down and accepts no new sessions")]
    ShuttingDown,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot create session directories: {0}")]
    Io(#[from] std::io::Error),
    #[error("the supervisor has stopped")]
    Gone,
    #[error("{0}")]
    Upgrade(String),
    #[error("session '{0}' is being upgraded already; wait for that upgrade to finish")]
    UpgradeInProgress(String),
}

enum OwnerCommand {
    Launch {
        staged: Box<Staged>,
        resume: Option<Resume>,
        reply: oneshot::Sender<Result<Session, SupervisorError>>,
    },
    Stop {
        id_or_name: String,
        reply: oneshot::Sender<Result<Session, SupervisorError>>,
    },
    /// Takes no more tasks, finishes those it runs, then ends as by a
    /// shutdown (queued tasks stay queued); stopped after `within`.
    Drain {
        id: SessionId,
        within: Duration,
        reply: oneshot::Sender<Result<Session, SupervisorError>>,
    },
    /// Runs another version of the session's capsule (`upgrade.rs`).
    Upgrade {
        id: SessionId,
        drain: Duration,
        pending: Box<upgrade::Pending>,
    },
    /// Which live session (if any) an id or name refers to.
    Resolve {
        id_or_name: String,
        reply: oneshot::Sender<Option<SessionId>>,
    },
    Ended {
        id: SessionId,
        /// The final record, when it could be written.
        record: Option<Box<Session>>,
        /// It hibernated: nothing ended but its launch.
        hibernated: bool,
    },
    /// Sessions found hibernated at start-up: their names are taken.
    Asleep {
        sessions: Vec<(SessionId, String)>,
        reply: oneshot::Sender<()>,
    },
    Shutdown {
        grace: Duration,
        reply: oneshot::Sender<()>,
    },
}

/// An existing row being run again: brought back at start-up, or
/// restarted by an operator (`restart.rs`).
struct Resume {
    id: SessionId,
    name: String,
    restart_count: u32,
    /// What its events say.
    why: &'static str,
    /// Awaited once its row exists, before it runs anything: a session
    /// taken over from another node brings its tasks in.
    arriving: Option<futures::future::BoxFuture<'static, ()>>,
}

struct Live {
    name: String,
    stop: CancellationToken,
    by_shutdown: Arc<AtomicBool>,
    waiting_stop: Vec<oneshot::Sender<Result<Session, SupervisorError>>>,
    /// An upgrade waiting for this version to end.
    upgrade: Option<Box<upgrade::Pending>>,
}

/// Cloneable handle used by the API and the daemon.
#[derive(Clone)]
pub struct Supervisor {
    tx: mpsc::Sender<OwnerCommand>,
    ended: broadcast::Sender<Ended>,
    shared: Arc<Shared>,
}

/// Broadcast when a session has ended for good.
#[derive(Clone)]
struct Ended {
    id: SessionId,
    record: Option<Arc<Session>>,
}

impl Supervisor {
    /// Starts the owner task.
    /// Starts the owner task over what every session shares (built by the
    /// daemon's start-up: `Shared::new`).
    pub fn spawn(shared: Shared) -> Self {
        let shared = Arc::new(shared);
        let (tx, rx) = mpsc::channel(1024);
        let (ended, _) = broadcast::channel(1024);
        let owner = Owner {
            shared: Arc::clone(&shared),
            tx: tx.clone(),
            ended: ended.clone(),
            live: HashMap::new(),
            asleep: HashMap::new(),
            early_wakes: HashMap::new(),
            names: HashMap::new(),
            shutting_down: false,
        };
        tokio::spawn(owner.run(rx));
        let supervisor = Self { tx, ended, shared };
        supervisor.serve_wakes();
        supervisor
    }

    /// Signalled when a session's state changes (its events are recorded).
    pub fn session_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.shared.store.session_changes()
    }

    /// The sequence number `n` events before the newest (0 when fewer).
    pub async fn session_events_tail(&self, n: u64) -> Result<i64, SupervisorError> {
        Ok(self.shared.store.session_events_tail(n).await?)
    }

    /// Sessions' state changes after sequence number `after`, oldest first.
    pub async fn session_events_after(
        &self,
        after: i64,
    ) -> Result<Vec<roost_wire::api::SessionEvent>, SupervisorError> {
        Ok(self.shared.store.session_events_after(after).await?)
    }

    /// The registry staging resolves artifacts from (replaced on SIGHUP).
    pub fn registry(&self) -> Arc<dyn crate::registry::Registry> {
        self.shared.registry()
    }

    pub fn set_registry(&self, registry: Arc<dyn crate::registry::Registry>) {
        self.shared.set_registry(registry);
    }

    pub fn live_sessions(&self) -> u64 {
        self.shared.live_count.load(Ordering::Relaxed)
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, SupervisorError>>) -> OwnerCommand,
    ) -> Result<T, SupervisorError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(make(reply))
            .await
            .map_err(|_| SupervisorError::Gone)?;
        rx.await.map_err(|_| SupervisorError::Gone)?
    }

    /// Drains a live session: it takes no more tasks, finishes those it
    /// runs (stopped after `within`), and ends with its queued tasks still
    /// queued (for where it starts next). Its final record.
    pub async fn drain(
        &self,
        id: &SessionId,
        within: Duration,
    ) -> Result<Session, SupervisorError> {
        let id = id.clone();
        self.ask(|reply| OwnerCommand::Drain { id, within, reply })
            .await
    }

    /// Stops a live session and returns its final record (an ended one is returned as is).
    pub async fn stop(&self, id_or_name: &str) -> Result<Session, SupervisorError> {
        let id_or_name = id_or_name.to_string();
        self.ask(|reply| OwnerCommand::Stop { id_or_name, reply })
            .await
    }

    /// The session's record once it has ended, or as it is after `timeout`.
    pub async fn wait(
        &self,
        id_or_name: &str,
        timeout: Duration,
    ) -> Result<Session, SupervisorError> {
        let mut ended = self.ended.subscribe();
        // Live sessions are known to the owner; only ended ones need the database.
        let Some(id) = self.live_id(id_or_name).await? else {
            return self.get(id_or_name).await;
        };
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, ended.recv()).await {
                Ok(Ok(event)) if event.id != id => continue,
                Ok(Ok(Ended {
                    record: Some(record),
                    ..
                })) => return Ok(Session::clone(&record)),
                // We lagged, or the record is missing: the database has the answer.
                Ok(_) | Err(_) => {
                    let session = self.get(&id).await?;
                    if session.state.is_ended() || tokio::time::Instant::now() >= deadline {
                        return Ok(session);
                    }
                }
            }
        }
    }

    /// The id of the live session with this id or name, from the owner.
    async fn live_id(&self, id_or_name: &str) -> Result<Option<SessionId>, SupervisorError> {
        let (reply, rx) = oneshot::channel();
        let id_or_name = id_or_name.to_string();
        self.tx
            .send(OwnerCommand::Resolve { id_or_name, reply })
            .await
            .map_err(|_| SupervisorError::Gone)?;
        rx.await.map_err(|_| SupervisorError::Gone)
    }

    pub async fn get(&self, id_or_name: &str) -> Result<Session, SupervisorError> {
        self.shared
            .store
            .get(id_or_name)
            .await?
            .ok_or_else(|| SupervisorError::NotFound(id_or_name.to_string()))
    }

    /// Recorded sessions: live ones, or all with `all`.
    pub async fn list(&self, all: bool) -> Result<Vec<Session>, SupervisorError> {
        Ok(self.shared.store.list(all).await?)
    }

    /// A session's transitions: state, detail, when.
    pub async fn events(
        &self,
        id: &str,
    ) -> Result<Vec<(String, Option<String>, String)>, SupervisorError> {
        Ok(self.shared.store.events(id).await?)
    }

    /// An agent session's tasks with their token use.
    pub async fn tasks(
        &self,
        id: &str,
    ) -> Result<Vec<roost_wire::api::TaskRecord>, SupervisorError> {
        Ok(self.shared.store.tasks(id).await?)
    }

    /// Stops every session (recorded as stopped by shutdown) and waits up to `grace`.
    pub async fn shutdown(&self, grace: Duration) {
        let (reply, rx) = oneshot::channel();
        if self
            .tx
            .send(OwnerCommand::Shutdown { grace, reply })
            .await
            .is_ok()
        {
            let _ = rx.await;
        }
    }
}

struct Owner {
    shared: Arc<Shared>,
    tx: mpsc::Sender<OwnerCommand>,
    ended: broadcast::Sender<Ended>,
    live: HashMap<SessionId, Live>,
    /// Hibernated sessions (`hibernate.rs`) by id: their names (kept in
    /// `names` too) and routes stay taken.
    asleep: HashMap<SessionId, String>,
    /// Wakes asked while the session's launch was still ending hibernated.
    early_wakes: HashMap<SessionId, hibernate::EarlyWake>,
    names: HashMap<String, SessionId>,
    shutting_down: bool,
}

impl Owner {
    async fn run(mut self, mut rx: mpsc::Receiver<OwnerCommand>) {
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
    fn launch(
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
                if !self.live.contains_key(&r.id) {
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

    fn ended(&mut self, id: &SessionId, record: Option<Box<Session>>) {
        let Some(mut live) = self.live.remove(id) else {
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
        self.shared
            .live_count
            .store(self.live.len() as u64, Ordering::Relaxed);
        let record = record.map(|r| Arc::new(*r));
        for waiter in live.waiting_stop {
            let _ = waiter.send(match &record {
                Some(session) => Ok(Session::clone(session)),
                None => Err(SupervisorError::NotFound(id.to_string())),
            });
        }
        let _ = self.ended.send(Ended {
            id: id.clone(),
            record,
        });
    }
}
