//! The cluster's task journal: every task a node accepts, and each of its
//! events, in the replicated JetStream stream `ROOST_TASKS` (subject
//! `roost.tasks.<route>.<task id>`) before its client or its session hears
//! of it. [`Journal`] is the broker's `TaskLog` on a node: this node's
//! SQLite first (the source of truth for what it runs), then the stream
//! (what another node reads when it takes the route over, `failover.rs`).
//! A task's first start is written only if nothing else was written for
//! it since this node last did (JetStream's expected last subject
//! sequence): a node that took the task over and a node that would start
//! it cannot both win.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use futures::FutureExt;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use super::Cluster;
use crate::ids::TaskId;

mod writer;
use crate::tasks::log::{AppendThen, Inserted, Insertion, LogError, TaskLog};
use crate::tasks::model::{
    A2aTask, EventKind, NewA2aTask, PushConfig, PushDelivery, PushMade, TaskEvent, TaskFilter,
    TaskState,
};

/// The stream every node journals its tasks in.
pub const STREAM: &str = "ROOST_TASKS";
/// How long the stream keeps an entry: a route taken over brings its
/// tasks of the last 30 days (older ones stay readable on the node that
/// ran them while it lives).
const KEEP: Duration = Duration::from_secs(30 * 24 * 3600);

/// The subject of a task's entries.
pub(super) fn subject(route: &str, task: &str) -> String {
    format!("roost.tasks.{route}.{task}")
}

/// Makes (or updates) the stream.
pub(super) async fn open(
    js: &jetstream::Context,
    replicas: usize,
) -> Result<jetstream::stream::Stream, jetstream::context::CreateStreamError> {
    js.get_or_create_stream(jetstream::stream::Config {
        name: STREAM.into(),
        description: Some("roostd A2A tasks: each accepted task and its events, by route".into()),
        subjects: vec!["roost.tasks.>".into()],
        max_age: KEEP,
        num_replicas: replicas,
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    })
    .await
}

/// A task as accepted: what another node needs to store and run it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Accepted {
    pub id: String,
    pub session_id: String,
    pub route: String,
    pub owner: String,
    pub context_id: String,
    pub message_id: String,
    pub text: String,
    pub message_json: String,
    pub created_at: String,
}

impl Accepted {
    /// The parts of the message it was accepted with (read from the
    /// message: failover, the one reader, is rare).
    pub fn parts(&self) -> Vec<serde_json::Value> {
        serde_json::from_str(&self.message_json)
            .map(|m| crate::tasks::model::message_parts(&m))
            .unwrap_or_default()
    }

    /// The task as a node's own log stores it, under `id` and `session_id`.
    pub fn as_new<'a>(
        &'a self,
        id: &'a str,
        session_id: &'a str,
        parts: &'a [serde_json::Value],
    ) -> NewA2aTask<'a> {
        NewA2aTask {
            id,
            session_id,
            route: &self.route,
            owner: &self.owner,
            context_id: &self.context_id,
            message_id: &self.message_id,
            text: &self.text,
            message_json: &self.message_json,
            parts,
            tick: None,
        }
    }
}

/// One entry of a task's subject.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "snake_case")]
pub enum Entry {
    /// Accepted (`working`: and started at once, by a launch that waited).
    Accepted { task: Accepted, working: bool },
    /// Events, as the node that runs it logged them.
    Events { kinds: Vec<EventKind> },
    /// Node `node` took the route over and, the task never having started,
    /// runs it.
    Taken { node: String },
}

/// Whether `kind` starts a task (its first `working`).
fn starts(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::Status {
            state: TaskState::Working,
            ..
        }
    )
}

/// The journal failed a task's entry.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("the cluster's task journal did not take it: {0}")]
    Refused(String),
    /// Another node took the task over first (or wrote to it since).
    #[error("node {0} took the route over; the task runs there")]
    Moved(String),
}

fn failed(e: JournalError) -> LogError {
    LogError::Failed(Box::new(e))
}

/// One entry to write, in order.
struct Job {
    task: TaskId,
    /// The task's route; `None`: read from this node's log first.
    route: Option<String>,
    entry: Entry,
    /// Written only if the subject's last entry is still this one.
    expect: Option<u64>,
    /// Set on a task's first entry: a second copy is a no-op (`Nats-Msg-Id`).
    dedupe: bool,
    /// Not written when another node holds the route now (`Moved`).
    unless_moved: bool,
    done: Box<dyn FnOnce(Result<u64, JournalError>) + Send>,
}

/// The broker's task log on a node of a cluster.
pub struct Journal(Arc<Core>);

struct Core {
    local: Arc<dyn TaskLog>,
    cluster: Arc<Cluster>,
    /// Tasks this node journals that have not ended: their route, and for
    /// one not started yet the sequence of its last entry, which its start
    /// expects.
    known: Mutex<HashMap<TaskId, (String, Option<u64>)>>,
    jobs: mpsc::UnboundedSender<Job>,
}

impl Journal {
    /// `local` (this node's SQLite) journaled through `cluster`'s stream.
    pub fn new(local: Arc<dyn TaskLog>, cluster: Arc<Cluster>) -> Self {
        let (jobs, rx) = mpsc::unbounded_channel();
        tokio::spawn(writer::write(Arc::clone(&local), Arc::clone(&cluster), rx));
        Self(Arc::new(Core {
            local,
            cluster,
            known: Mutex::default(),
            jobs,
        }))
    }

    /// This node's own log (SQLite), for tasks brought in from the stream.
    pub(super) fn local(&self) -> &Arc<dyn TaskLog> {
        &self.0.local
    }

    /// A task taken over here, never started: its start expects `seq`.
    pub(super) fn taken(&self, id: TaskId, route: String, seq: u64) {
        lock(&self.0.known).insert(id, (route, Some(seq)));
    }

    /// Writes `entry` to the subject of task `task` on `route`, expecting
    /// `expect` as its last entry: the new entry's sequence.
    pub(super) async fn write(
        &self,
        route: &str,
        task: &str,
        entry: Entry,
        expect: Option<u64>,
    ) -> Result<u64, JournalError> {
        self.0
            .write(TaskId::from(task), Some(route.into()), entry, expect)
            .await
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Core {
    async fn write(
        &self,
        task: TaskId,
        route: Option<String>,
        entry: Entry,
        expect: Option<u64>,
    ) -> Result<u64, JournalError> {
        let (tx, rx) = oneshot::channel();
        let dedupe = matches!(entry, Entry::Accepted { .. });
        self.queue(Job {
            task,
            route,
            entry,
            expect,
            dedupe,
            unless_moved: false,
            done: Box::new(move |r| {
                let _ = tx.send(r);
            }),
        });
        rx.await
            .unwrap_or_else(|_| Err(JournalError::Refused("roostd is stopping".into())))
    }

    fn queue(&self, job: Job) {
        if let Err(mpsc::error::SendError(job)) = self.jobs.send(job) {
            (job.done)(Err(JournalError::Refused("roostd is stopping".into())));
        }
    }
}

#[async_trait::async_trait]
impl TaskLog for Journal {
    /// Committed here, then journaled: only a task in both is accepted. One
    /// the journal refuses is failed here (it never runs) and the client
    /// hears why.
    fn insert(&self, task: &NewA2aTask<'_>, working: bool, dedupe: bool) -> (A2aTask, Insertion) {
        let (record, insertion) = self.0.local.insert(task, working, dedupe);
        let accepted = Accepted {
            id: task.id.to_string(),
            session_id: task.session_id.to_string(),
            route: task.route.to_string(),
            owner: task.owner.to_string(),
            context_id: task.context_id.to_string(),
            message_id: task.message_id.to_string(),
            text: task.text.to_string(),
            message_json: task.message_json.to_string(),
            created_at: record.created_at.clone(),
        };
        let core = Arc::clone(&self.0);
        let insertion = async move {
            Ok(match insertion.await? {
                Inserted::Committed(true) => {
                    journal_accepted(&core, accepted, working).await?;
                    Inserted::Committed(true)
                }
                Inserted::Unknown(pending) => Inserted::Unknown(
                    async move {
                        let made = pending.await?;
                        if made {
                            journal_accepted(&core, accepted, working).await?;
                        }
                        Ok(made)
                    }
                    .boxed(),
                ),
                other => other,
            })
        };
        (record, insertion.boxed())
    }

    async fn retried(&self, route: (&str, &str), message_id: &str) -> Result<A2aTask, LogError> {
        self.0.local.retried(route, message_id).await
    }

    /// Committed here, then journaled, then `then`. A task's first start
    /// is journaled only if no other node took it meanwhile; if one did,
    /// `then` hears an error and the task does not run here. Events of a
    /// route another node holds now are not journaled (they are that
    /// node's to write).
    fn append_then(&self, task_id: &TaskId, kinds: Vec<EventKind>, urgent: bool, then: AppendThen) {
        let core = Arc::clone(&self.0);
        let id = task_id.clone();
        self.0.local.append_then(
            task_id,
            kinds,
            urgent,
            Box::new(move |written| {
                let logged: Vec<EventKind> = match &written {
                    Ok(events) => events.iter().flatten().map(|e| e.kind.clone()).collect(),
                    Err(_) => Vec::new(),
                };
                if logged.is_empty() || core.cluster.jetstream().is_none() {
                    return then(written);
                }
                // Queued here, in the log's order (this runs on the store's
                // writer thread: nothing awaits).
                let ends = logged.iter().any(|k| {
                    matches!(k, EventKind::Status { state, .. } if state.is_terminal())
                });
                let (route, expect) = {
                    let mut known = lock(&core.known);
                    let (route, expect) = match known.get_mut(&id) {
                        Some((route, unstarted)) => (
                            Some(route.clone()),
                            if logged.iter().any(starts) {
                                unstarted.take()
                            } else {
                                None
                            },
                        ),
                        None => (None, None),
                    };
                    if ends {
                        known.remove(&id);
                    }
                    (route, expect)
                };
                let task = id.clone();
                core.queue(Job {
                    task: id,
                    route,
                    entry: Entry::Events { kinds: logged },
                    expect,
                    dedupe: false,
                    unless_moved: true,
                    done: Box::new(move |result| match result {
                        Ok(_) => then(written),
                        // Another node holds the route: not this node's to
                        // write, and a task it took is not started here.
                        Err(JournalError::Moved(node)) if expect.is_some() => {
                            tracing::warn!(task_id = %task, node, "a task another node took over is not started here");
                            then(Err(failed(JournalError::Moved(node))))
                        }
                        Err(JournalError::Moved(_)) => then(written),
                        Err(error) => {
                            tracing::error!(task_id = %task, %error,
                                "a task's events were stored here but not in the cluster's journal");
                            then(if expect.is_some() {
                                Err(failed(error))
                            } else {
                                written
                            })
                        }
                    }),
                });
            }),
        );
    }

    async fn task(&self, id: &TaskId) -> Result<Option<A2aTask>, LogError> {
        self.0.local.task(id).await
    }

    async fn events(&self, id: &TaskId, after: u64) -> Result<Vec<TaskEvent>, LogError> {
        self.0.local.events(id, after).await
    }

    async fn tasks(&self, filter: &TaskFilter<'_>) -> Result<(Vec<A2aTask>, u64), LogError> {
        self.0.local.tasks(filter).await
    }

    async fn ids_in(
        &self,
        states: &[TaskState],
        ended_sessions: bool,
    ) -> Result<Vec<TaskId>, LogError> {
        self.0.local.ids_in(states, ended_sessions).await
    }

    async fn pending(&self, session_id: &str) -> Result<Vec<A2aTask>, LogError> {
        self.0.local.pending(session_id).await
    }

    async fn context_owner(
        &self,
        route: &str,
        context_id: &str,
    ) -> Result<Option<String>, LogError> {
        self.0.local.context_owner(route, context_id).await
    }

    fn write_deadline(&self) -> Duration {
        self.0.local.write_deadline()
    }

    async fn create_push_config(
        &self,
        config: &PushConfig,
        backfill: bool,
        max: u32,
    ) -> Result<PushMade, LogError> {
        self.0.local.create_push_config(config, backfill, max).await
    }

    async fn push_configs(&self, task_id: &TaskId) -> Result<Vec<PushConfig>, LogError> {
        self.0.local.push_configs(task_id).await
    }

    async fn delete_push_config(&self, task_id: &TaskId, id: &str) -> Result<bool, LogError> {
        self.0.local.delete_push_config(task_id, id).await
    }

    async fn due_pushes(&self, now_ms: i64, limit: u32) -> Result<Vec<PushDelivery>, LogError> {
        self.0.local.due_pushes(now_ms, limit).await
    }

    async fn next_push_at(&self) -> Result<Option<i64>, LogError> {
        self.0.local.next_push_at().await
    }

    async fn push_done(&self, outbox_id: i64) -> Result<(), LogError> {
        self.0.local.push_done(outbox_id).await
    }

    async fn push_retry(&self, outbox_id: i64, next_at: i64, error: &str) -> Result<(), LogError> {
        self.0.local.push_retry(outbox_id, next_at, error).await
    }

    fn push_wake(&self) -> Arc<tokio::sync::Notify> {
        self.0.local.push_wake()
    }
}

/// Journals a task this node committed. Not joined yet (`cluster.required:
/// false`): this node's alone until then. Refused: failed here, so it
/// never runs, and the caller hears why.
async fn journal_accepted(core: &Arc<Core>, task: Accepted, working: bool) -> Result<(), LogError> {
    if core.cluster.jetstream().is_none() {
        return Ok(());
    }
    let id = TaskId::from(task.id.as_str());
    let route = task.route.clone();
    let deadline = core.local.write_deadline();
    let entry = Entry::Accepted { task, working };
    let written = tokio::time::timeout(
        deadline,
        core.write(id.clone(), Some(route.clone()), entry, None),
    )
    .await
    .unwrap_or_else(|_| {
        Err(JournalError::Refused(format!(
            "no answer within {} s",
            deadline.as_secs()
        )))
    });
    match written {
        Ok(seq) => {
            let unstarted = (!working).then_some(seq);
            lock(&core.known).insert(id, (route, unstarted));
            Ok(())
        }
        Err(error) => {
            tracing::error!(task_id = %id, route, %error, "the cluster's journal refused a new task: it will not run");
            let why = format!(
                "{error}; it was not run. Send it again with a new messageId (this one \
                 now names this failed task)"
            );
            core.local.append_then(
                &id,
                vec![EventKind::Status {
                    parts: None,
                    state: TaskState::Failed,
                    message: Some(why),
                }],
                true,
                Box::new(|_| {}),
            );
            Err(failed(error))
        }
    }
}
