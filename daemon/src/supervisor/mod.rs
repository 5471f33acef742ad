//! The supervisor: sole owner of the live-session table. Handlers send it
//! [`OwnerCommand`]s and get replies on oneshots; each session runs as its own task
//! ([`session`]) and reports back when it has ended for good.

mod backoff;
mod grants;
mod hibernate;
mod owner;
use owner::Owner;
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

use crate::ids::SessionId;
use crate::staging::{StageError, Staged};
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

    /// Launches that have ended (stopped, failed, hibernated) since start.
    pub fn launches_ended(&self) -> u64 {
        self.shared.launches_ended.load(Ordering::Relaxed)
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

/// A session has ended for good: those waiting on its stop get its final
/// record (or why there is none), and so does every `wait`.
fn tell_ended(
    ended: &broadcast::Sender<Ended>,
    id: SessionId,
    record: Option<Arc<Session>>,
    waiters: Vec<oneshot::Sender<Result<Session, SupervisorError>>>,
) {
    for waiter in waiters {
        let _ = waiter.send(match &record {
            Some(session) => Ok(Session::clone(session)),
            None => Err(SupervisorError::NotFound(id.to_string())),
        });
    }
    let _ = ended.send(Ended { id, record });
}
