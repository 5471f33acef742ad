//! A2A tasks as roostd knows them, apart from any wire format: states, the
//! per-task event log, and the broker that accepts a task durably, hands it
//! to its session's inbox, fans events out to subscribers and cancels running
//! work. It knows no HTTP (the gateway, `a2a`, renders it) and no SQL (`store`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::store::{NewA2aTask, Store, StoreError};

/// Where a task is (stored as the 0.3 spelling).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskState {
    Submitted,
    Working,
    InputRequired,
    Completed,
    Failed,
    Canceled,
    Rejected,
}

impl TaskState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Submitted => "submitted",
            Self::Working => "working",
            Self::InputRequired => "input-required",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
            Self::Rejected => "rejected",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "submitted" => Self::Submitted,
            "working" => Self::Working,
            "input-required" => Self::InputRequired,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "canceled" => Self::Canceled,
            "rejected" => Self::Rejected,
            _ => return None,
        })
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Failed | Self::Canceled | Self::Rejected
        )
    }
}

/// What happened to a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// A state change, with an optional message from the agent.
    Status {
        state: TaskState,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// A part of one of the task's artifacts (`answer`: the answer, whole or
    /// in chunks): text, or `part`, a 1.0 Part object (data or file).
    Artifact {
        artifact_id: String,
        text: String,
        #[serde(default)]
        append: bool,
        #[serde(default)]
        last_chunk: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        part: Option<serde_json::Value>,
    },
    /// The agent answered with a message instead of a task result.
    Reply { text: String },
    /// A follow-up message from the client (the answer to an input request).
    Input { message_id: String, text: String },
}

/// One entry of a task's event log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskEvent {
    pub seq: u64,
    pub at: String,
    pub kind: EventKind,
}

/// A task as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct A2aTask {
    pub id: String,
    pub context_id: String,
    pub session_id: String,
    pub route: String,
    pub state: TaskState,
    /// The text of the message that created it.
    pub text: String,
    pub message_id: String,
    /// The last status message, if the agent gave one.
    pub status_message: Option<String>,
    pub answer: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// The text of a stored message: its text parts, joined by blank lines.
pub fn message_text(message: &serde_json::Value) -> String {
    message["parts"]
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n\n")
        })
        .unwrap_or_default()
}

/// Why a task accepted for a session that ended was failed.
pub const NEVER_RAN: &str = "the session ended before the task ran";

/// The receiving end of a session's inbox. Tasks travel boxed: the channel
/// allocates its slots in blocks of 32 up front, and every live session has one.
pub type InboxRx = mpsc::Receiver<Box<Incoming>>;

/// A task handed to a session.
#[derive(Debug, Clone)]
pub struct Incoming {
    pub task_id: String,
    pub context_id: String,
    pub message_id: String,
    pub text: String,
    /// The W3C `traceparent` the client sent (not kept across restarts).
    pub traceparent: Option<String>,
}

/// Why a task was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error(
        "session '{route}' takes no A2A tasks (its lifecycle task_acceptance is none, or it is a \
         script capsule that does not export murmur:a2a/handler@0.1.0)"
    )]
    NotAccepting { route: String },
    #[error(
        "session '{route}' already has {depth} tasks waiting (lifecycle.queue_depth); try again \
         after one finishes"
    )]
    QueueFull { route: String, depth: usize },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a follow-up message on a task was not taken.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    #[error("task '{task_id}' is not waiting for input; send a new message without taskId")]
    NotWaiting { task_id: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How a request for input ended without an answer.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// Nobody answered within the lifecycle's `input_timeout_secs` (the task failed).
    #[error("input-timeout")]
    Timeout,
    #[error("the task was canceled while it waited for input")]
    Canceled,
    #[error("the task store failed while asking for input; see roostd's log")]
    Store,
}

/// Why a task failed when nobody answered its input request in time.
pub const INPUT_TIMEOUT: &str = "input-timeout";

/// The A2A task a guest call works on: what `murmur:task/task#request-input`
/// reaches.
#[derive(Clone)]
pub struct TaskLink {
    pub broker: Arc<Broker>,
    pub task_id: String,
    pub context_id: String,
    /// `lifecycle.input_timeout_secs`.
    pub input_timeout: Option<std::time::Duration>,
    pub cancel: CancellationToken,
    /// The `traceparent` the client sent with the task.
    pub traceparent: Option<String>,
    /// Whether the task's `working` status is written (or queued): it goes
    /// with the task's first event, see [`Broker::serve`].
    started: Arc<AtomicBool>,
    /// Updates queued but not yet committed, at most [`UPDATES_IN_FLIGHT`].
    in_flight: Arc<Semaphore>,
}

/// How many of a task's updates (chunks, artifacts) may wait for their
/// commit while the guest goes on.
const UPDATES_IN_FLIGHT: usize = 64;

fn working() -> EventKind {
    EventKind::Status {
        state: TaskState::Working,
        message: None,
    }
}

/// A 32-hex-digit W3C trace id named after a roostd id (`tsk_<uuid>` gives
/// its uuid; anything else a hash of it).
pub fn trace_id_of(id: &str) -> String {
    let tail = id.rsplit('_').next().unwrap_or(id);
    if tail.len() == 32 && tail.bytes().all(|b| b.is_ascii_hexdigit()) {
        return tail.to_ascii_lowercase();
    }
    use sha2::Digest;
    hex::encode(&sha2::Sha256::digest(id.as_bytes())[..16])
}

/// A client's answer to an input request.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub message_id: String,
    pub text: String,
}

impl TaskLink {
    /// The task's trace: the client's, else one named after the task.
    pub fn trace_id(&self) -> String {
        self.traceparent
            .as_deref()
            .and_then(|t| {
                let mut parts = t.split('-');
                let (_, id) = (parts.next()?, parts.next()?);
                (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()))
                    .then(|| id.to_ascii_lowercase())
            })
            .unwrap_or_else(|| trace_id_of(&self.task_id))
    }

    pub async fn request_input(&self, prompt: &str) -> Result<Reply, InputError> {
        let first = self.first_events();
        self.broker
            .request_input(
                &self.task_id,
                first,
                prompt,
                self.input_timeout,
                &self.cancel,
            )
            .await
    }

    /// What must precede the task's next event: `working`, the first time.
    fn first_events(&self) -> Vec<EventKind> {
        if self.started.swap(true, Ordering::AcqRel) {
            Vec::new()
        } else {
            vec![working()]
        }
    }

    /// Records the task as working if nothing has yet; `false` when it
    /// had already ended (canceled).
    async fn mark_working(&self) -> Result<bool, StoreError> {
        let first = self.first_events();
        if first.is_empty() {
            return Ok(true);
        }
        Ok(self
            .broker
            .publish_all(&self.task_id, first)
            .await?
            .iter()
            .all(Option::is_some))
    }

    /// Streams a guest's text to the task's subscribers, in order: text as an
    /// `append` update of the answer artifact, thinking as a `working` status
    /// message.
    pub async fn chunk(&self, text: &str, thinking: bool) {
        let kind = if thinking {
            EventKind::Status {
                state: TaskState::Working,
                message: Some(text.to_string()),
            }
        } else {
            EventKind::Artifact {
                artifact_id: ANSWER_ARTIFACT.into(),
                text: text.to_string(),
                append: true,
                last_chunk: false,
                part: None,
            }
        };
        self.artifact(kind).await;
    }

    /// Records an event of the task (an artifact update) and tells its
    /// subscribers once it is committed. The guest goes on meanwhile: up to
    /// [`UPDATES_IN_FLIGHT`] updates wait for their commit at a time, and
    /// everything the task records later is committed after them.
    pub async fn artifact(&self, kind: EventKind) {
        let Ok(permit) = Arc::clone(&self.in_flight).acquire_owned().await else {
            return;
        };
        let mut events = self.first_events();
        events.push(kind);
        self.broker.publish_queued(&self.task_id, events, permit);
    }
}

/// The task a session is working on now (set per task; tool calls read it).
pub type TaskSlot = Arc<Mutex<Option<TaskLink>>>;

/// What a new task starts from.
pub struct NewTask<'a> {
    pub session_id: &'a str,
    pub route: &'a str,
    pub message_id: &'a str,
    pub context_id: Option<&'a str>,
    pub text: &'a str,
    /// The message as received (kept with the task).
    pub message_json: &'a str,
    /// The W3C `traceparent` the client sent, if any.
    pub traceparent: Option<&'a str>,
    /// The acknowledgement waits for the task's end (a blocking send), so
    /// the record may share the commit of the task's first events.
    pub answer_waits: bool,
}

struct Inbox {
    tx: mpsc::Sender<Box<Incoming>>,
    depth: usize,
}

/// Live events of one task; dropping the last one frees the channel (so a
/// subscription to a task that has already ended leaks nothing).
pub struct Subscription {
    pub rx: broadcast::Receiver<TaskEvent>,
    broker: Arc<Broker>,
    task_id: String,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut live = lock(&self.broker.live);
        if live
            .get(&self.task_id)
            .is_some_and(|tx| tx.receiver_count() <= 1)
        {
            live.remove(&self.task_id);
        }
    }
}

/// Where each task's live events go.
type LiveTasks = HashMap<String, broadcast::Sender<TaskEvent>>;

/// Tells a task's subscribers about its committed events (on the task
/// writer's thread, so in log order).
fn fan_out(live: &Mutex<LiveTasks>, task_id: &str, written: &[Option<TaskEvent>]) {
    let mut live = lock(live);
    for event in written.iter().flatten() {
        if let Some(tx) = live.get(task_id) {
            let _ = tx.send(event.clone());
        }
        if matches!(&event.kind, EventKind::Status { state, .. } if state.is_terminal()) {
            live.remove(task_id);
        }
    }
}

/// Accepts tasks, delivers them, and fans their events out.
pub struct Broker {
    store: Store,
    inboxes: Mutex<HashMap<String, Inbox>>,
    live: Arc<Mutex<LiveTasks>>,
    /// Tokens of running tasks; a canceled token for a task canceled before
    /// it started (so it never starts).
    running: Mutex<HashMap<String, CancellationToken>>,
    /// Tasks in input-required, each with where the answer goes.
    waiting: Mutex<HashMap<String, oneshot::Sender<Reply>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Broker {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            inboxes: Mutex::default(),
            live: Arc::default(),
            running: Mutex::default(),
            waiting: Mutex::default(),
        }
    }

    /// A session starts taking tasks: at most `depth` wait at a time.
    pub fn open_inbox(&self, session_id: &str, depth: usize) -> InboxRx {
        let (tx, rx) = mpsc::channel(depth.max(1));
        lock(&self.inboxes).insert(
            session_id.to_string(),
            Inbox {
                tx,
                depth: depth.max(1),
            },
        );
        rx
    }

    /// The session takes no more tasks; those still waiting fail visibly.
    pub async fn close_inbox(&self, session_id: &str, mut rx: InboxRx) {
        lock(&self.inboxes).remove(session_id);
        rx.close();
        let mut waiting = Vec::new();
        while let Some(task) = rx.recv().await {
            waiting.push(task.task_id);
        }
        self.fail_all(waiting, NEVER_RAN).await;
    }

    /// Records the task and its first message and hands it to the session:
    /// the caller may acknowledge only after this returns `Ok` (the record
    /// is committed). The session may start on it meanwhile; what it records
    /// is committed after the record, and if the record fails so do they
    /// (the task then ran unrecorded and the client gets an error). The
    /// subscription to its events exists before the session has it, so no
    /// event can be missed.
    pub async fn submit(
        self: &Arc<Self>,
        new: NewTask<'_>,
    ) -> Result<(A2aTask, Subscription), SubmitError> {
        let permit_tx = {
            let inboxes = lock(&self.inboxes);
            let inbox = inboxes
                .get(new.session_id)
                .ok_or_else(|| SubmitError::NotAccepting {
                    route: new.route.to_string(),
                })?;
            (inbox.tx.clone(), inbox.depth)
        };
        let (tx, depth) = permit_tx;
        let permit = tx.try_reserve_owned().map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => SubmitError::QueueFull {
                route: new.route.to_string(),
                depth,
            },
            mpsc::error::TrySendError::Closed(_) => SubmitError::NotAccepting {
                route: new.route.to_string(),
            },
        })?;
        let task_id = format!("tsk_{}", uuid::Uuid::now_v7().simple());
        let context_id = new
            .context_id
            .map(str::to_string)
            .unwrap_or_else(|| format!("ctx_{}", uuid::Uuid::now_v7().simple()));
        // Queued before the session has the task, so whatever the session
        // records for it is committed after (or with) the record.
        let (task, insert) = self.store.queue_a2a_task(
            &NewA2aTask {
                id: &task_id,
                session_id: new.session_id,
                route: new.route,
                context_id: &context_id,
                message_id: new.message_id,
                text: new.text,
                message_json: new.message_json,
            },
            !new.answer_waits,
        );
        let live = self.subscribe(&task_id);
        permit.send(Box::new(Incoming {
            task_id,
            context_id,
            message_id: new.message_id.to_string(),
            text: new.text.to_string(),
            traceparent: new.traceparent.map(str::to_string),
        }));
        insert.committed().await?;
        Ok((task, live))
    }

    /// Appends an event to the task's log and tells its subscribers.
    /// A task that has ended takes no more events (`None`).
    pub async fn publish(
        &self,
        task_id: &str,
        kind: EventKind,
    ) -> Result<Option<TaskEvent>, StoreError> {
        Ok(self.publish_all(task_id, vec![kind]).await?.pop().flatten())
    }

    /// Appends events to the task's log in one commit, in order, and tells
    /// its subscribers; each as [`Broker::publish`] would.
    pub async fn publish_all(
        &self,
        task_id: &str,
        kinds: Vec<EventKind>,
    ) -> Result<Vec<Option<TaskEvent>>, StoreError> {
        let (reply, answer) = oneshot::channel();
        let live = Arc::clone(&self.live);
        let id = task_id.to_string();
        self.store
            .append_task_events_then(task_id, kinds, true, move |written| {
                if let Ok(events) = &written {
                    fan_out(&live, &id, events);
                }
                let _ = reply.send(written);
            });
        answer.await.map_err(|_| StoreError::writer_stopped())?
    }

    /// Queues events for the task's log without waiting; its subscribers
    /// hear of them once they are committed, and `permit` is released then.
    fn publish_queued(&self, task_id: &str, kinds: Vec<EventKind>, permit: OwnedSemaphorePermit) {
        let live = Arc::clone(&self.live);
        let id = task_id.to_string();
        self.store
            .append_task_events_then(task_id, kinds, false, move |written| {
                match &written {
                    Ok(events) => fan_out(&live, &id, events),
                    Err(error) => {
                        tracing::warn!(%error, task_id = %id, "cannot record a task update");
                    }
                }
                drop(permit);
            });
    }

    /// Ends a task in `state` with an optional status message.
    pub async fn finish(
        &self,
        task_id: &str,
        state: TaskState,
        message: Option<&str>,
    ) -> Result<Option<TaskEvent>, StoreError> {
        self.publish(
            task_id,
            EventKind::Status {
                state,
                message: message.map(str::to_string),
            },
        )
        .await
    }

    /// Live events of a task from now on (replay the log from the store first).
    pub fn subscribe(self: &Arc<Self>, task_id: &str) -> Subscription {
        let rx = lock(&self.live)
            .entry(task_id.to_string())
            .or_insert_with(|| broadcast::channel(64).0)
            .subscribe();
        Subscription {
            rx,
            broker: Arc::clone(self),
            task_id: task_id.to_string(),
        }
    }

    /// A running task asks its client for input: the task moves to
    /// input-required with `prompt`, and this returns the text of the next
    /// message on the task. With no answer within `timeout` the task fails
    /// (`input-timeout`); a cancel ends the wait.
    pub async fn request_input(
        &self,
        task_id: &str,
        first: Vec<EventKind>,
        prompt: &str,
        timeout: Option<std::time::Duration>,
        cancel: &CancellationToken,
    ) -> Result<Reply, InputError> {
        let (tx, rx) = oneshot::channel();
        // Registered before the state is visible, so an immediate answer is not lost.
        lock(&self.waiting).insert(task_id.to_string(), tx);
        let asked = EventKind::Status {
            state: TaskState::InputRequired,
            message: Some(prompt.to_string()),
        };
        let mut events = first;
        events.push(asked);
        let asked = self.publish_all(task_id, events).await;
        if !asked.is_ok_and(|w| w.iter().all(Option::is_some)) {
            lock(&self.waiting).remove(task_id);
            return Err(InputError::Store);
        }
        let wait = async {
            match timeout {
                Some(t) => tokio::time::timeout(t, rx).await.ok(),
                None => Some(rx.await),
            }
        };
        let answer = tokio::select! {
            answer = wait => answer,
            () = cancel.cancelled() => {
                lock(&self.waiting).remove(task_id);
                return Err(InputError::Canceled);
            }
        };
        lock(&self.waiting).remove(task_id);
        match answer {
            // `resume` recorded the answer and the task as working again.
            Some(Ok(reply)) => Ok(reply),
            _ => {
                tracing::info!(
                    task_id,
                    "no answer to an input request in time; the task fails"
                );
                let _ = self
                    .finish(task_id, TaskState::Failed, Some(INPUT_TIMEOUT))
                    .await;
                Err(InputError::Timeout)
            }
        }
    }

    /// A follow-up message on a task in input-required: recorded in the
    /// task's log (its history) with the task working again, then handed to
    /// the waiting request.
    pub async fn resume(
        &self,
        task_id: &str,
        message_id: &str,
        text: &str,
    ) -> Result<A2aTask, ResumeError> {
        let not_waiting = || ResumeError::NotWaiting {
            task_id: task_id.to_string(),
        };
        let tx = lock(&self.waiting)
            .remove(task_id)
            .ok_or_else(not_waiting)?;
        let reply = Reply {
            message_id: message_id.to_string(),
            text: text.to_string(),
        };
        let input = EventKind::Input {
            message_id: message_id.to_string(),
            text: text.to_string(),
        };
        let written = self.publish_all(task_id, vec![input, working()]).await?;
        if !written.iter().all(Option::is_some) {
            return Err(not_waiting());
        }
        let task = self
            .store
            .a2a_task(task_id)
            .await?
            .ok_or_else(not_waiting)?;
        tx.send(reply).map_err(|_| not_waiting())?;
        Ok(task)
    }

    /// Stops relaying to queued sessions' inbox without failing its tasks
    /// (a shutdown: they stay queued and are delivered after the restart).
    pub fn detach_inbox(&self, session_id: &str) {
        lock(&self.inboxes).remove(session_id);
    }

    /// A session starts running a task: the token is cancelled by [`Broker::cancel`].
    /// Registers a delivered task as running: its cancel token, or `None`
    /// when the task was canceled before it started (it must not run).
    pub fn running(&self, task_id: &str) -> Option<CancellationToken> {
        let mut running = lock(&self.running);
        if running
            .get(task_id)
            .is_some_and(CancellationToken::is_cancelled)
        {
            running.remove(task_id);
            return None;
        }
        let token = CancellationToken::new();
        running.insert(task_id.to_string(), token.clone());
        Some(token)
    }

    pub fn done(&self, task_id: &str) {
        lock(&self.running).remove(task_id);
    }

    /// Cancels a task that has not ended: a running one is interrupted, a
    /// waiting one is marked canceled (its session skips it).
    pub async fn cancel(&self, task_id: &str) -> Result<(), StoreError> {
        let waiting = {
            let mut running = lock(&self.running);
            match running.get(task_id) {
                Some(token) => {
                    token.cancel();
                    false
                }
                // Its session must not start it: a canceled token says so.
                None => {
                    let token = CancellationToken::new();
                    token.cancel();
                    running.insert(task_id.to_string(), token);
                    true
                }
            }
        };
        if waiting {
            let ended = self
                .finish(task_id, TaskState::Canceled, Some("canceled by the client"))
                .await;
            // Not canceled after all (it had ended, or the write failed): no mark.
            if !matches!(ended, Ok(Some(_))) {
                self.done(task_id);
            }
            ended?;
        }
        Ok(())
    }

    /// At start-up, before any session runs: tasks that were running when
    /// roostd stopped are failed visibly (re-running them could repeat their
    /// tools' side effects); tasks that never started stay queued for their
    /// session. Returns how many were failed.
    pub async fn recover(&self) -> Result<usize, StoreError> {
        let ids = self
            .store
            .a2a_task_ids(&[TaskState::Working, TaskState::InputRequired], false)
            .await?;
        Ok(self
            .fail_all(
                ids,
                "interrupted: roostd stopped while the task was running; send it again",
            )
            .await)
    }

    /// After sessions were resumed: queued tasks whose session did not come
    /// back fail visibly.
    pub async fn fail_orphans(&self) -> Result<usize, StoreError> {
        let ids = self
            .store
            .a2a_task_ids(&[TaskState::Submitted], true)
            .await?;
        Ok(self
            .fail_all(ids, "its session did not come back after roostd restarted")
            .await)
    }

    /// Fails each task with `why` (an error is logged and the rest go on);
    /// returns how many were failed.
    pub async fn fail_all(&self, ids: impl IntoIterator<Item = String>, why: &str) -> usize {
        let mut failed = 0;
        for id in ids {
            self.done(&id);
            match self.finish(&id, TaskState::Failed, Some(why)).await {
                Ok(_) => failed += 1,
                Err(error) => tracing::error!(%error, task_id = %id, "cannot fail a task"),
            }
        }
        failed
    }

    /// Tasks accepted for a session that never started (delivered first when
    /// the session runs again).
    pub async fn pending(&self, session_id: &str) -> Vec<Incoming> {
        match self.store.pending_a2a_tasks(session_id).await {
            Ok(tasks) => tasks
                .into_iter()
                .map(|t| Incoming {
                    task_id: t.id,
                    context_id: t.context_id,
                    message_id: t.message_id,
                    text: t.text,
                    traceparent: None,
                })
                .collect(),
            Err(error) => {
                tracing::error!(%error, "cannot read queued tasks");
                Vec::new()
            }
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Deletes ended tasks per `retention` every `interval_secs` until `stop`.
    pub async fn prune_loop(
        self: Arc<Self>,
        retention: crate::config::RetentionConfig,
        stop: CancellationToken,
    ) {
        let every = std::time::Duration::from_secs(retention.interval_secs.max(1));
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(every) => {}
            }
            let before = (retention.max_age_secs > 0).then(|| {
                let at = std::time::SystemTime::now()
                    - std::time::Duration::from_secs(retention.max_age_secs);
                humantime::format_rfc3339_millis(at).to_string()
            });
            let keep = (retention.max_tasks > 0).then_some(retention.max_tasks);
            match self.store.prune_a2a_tasks(before.as_deref(), keep).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(tasks = n, "ended A2A tasks pruned (a2a.retention)"),
                Err(error) => tracing::warn!(%error, "cannot prune ended A2A tasks"),
            }
        }
    }
}

/// How a task's work ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Done: the text is the task's answer artifact.
    Completed(String),
    /// Done, answered with a message (the text) instead of a task result.
    Reply(String),
    Failed(String),
    /// The agent declined the task.
    Rejected(String),
    /// The client canceled it (the session goes on).
    Canceled,
    /// The session was stopped (the task fails).
    Stopped,
}

/// What waiting for the next task gave.
pub enum Next {
    Task(Incoming),
    /// Nothing came within the idle timeout.
    Idle,
    Stopped,
    /// The inbox is closed (or the session takes no A2A tasks).
    Closed,
}

/// The tasks one launch of a session takes: those accepted before it
/// (re)started first, then its inbox.
#[derive(Default)]
pub struct Queue {
    inbox: Option<InboxRx>,
    pending: std::collections::VecDeque<Incoming>,
}

impl Queue {
    /// `inbox` for this launch, with the tasks stored for the session that never started.
    pub async fn open(broker: &Broker, session_id: &str, inbox: Option<InboxRx>) -> Self {
        let pending = match &inbox {
            Some(_) => broker.pending(session_id).await.into(),
            None => Default::default(),
        };
        Self { inbox, pending }
    }

    /// The next task; `idle` (none: wait until stopped) bounds the wait.
    pub async fn next(
        &mut self,
        idle: Option<std::time::Duration>,
        stop: &CancellationToken,
    ) -> Next {
        if let Some(task) = self.pending.pop_front() {
            return Next::Task(task);
        }
        let Some(inbox) = self.inbox.as_mut() else {
            return Next::Closed;
        };
        let idle = async {
            match idle {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = stop.cancelled() => Next::Stopped,
            () = idle => Next::Idle,
            task = inbox.recv() => task.map_or(Next::Closed, |t| Next::Task(*t)),
        }
    }

    /// The launch ends: on a shutdown the queued tasks stay queued for the
    /// restarted session; otherwise those still waiting fail visibly.
    pub async fn release(mut self, broker: &Broker, session_id: &str, shutdown: bool) {
        if shutdown {
            self.pending.clear();
            if self.inbox.take().is_some() {
                broker.detach_inbox(session_id);
            }
        }
        let pending = std::mem::take(&mut self.pending);
        broker
            .fail_all(pending.into_iter().map(|t| t.task_id), NEVER_RAN)
            .await;
        if let Some(inbox) = self.inbox.take() {
            broker.close_inbox(session_id, inbox).await;
        }
    }
}

impl Broker {
    /// Runs one delivered task: points `slot` (through which tool calls ask
    /// for input and stream text) at it, runs `work`, records the answer and
    /// the final state. `None` when the task was canceled before it started.
    ///
    /// The task's `working` status is written with its first event: an
    /// update or input request, or its answer and end when `work` finishes
    /// without waiting (one commit instead of two), or on its own as soon as
    /// `work` first waits. A crash before then leaves the task `submitted`,
    /// so it is delivered again.
    pub async fn serve<Fut>(
        self: &Arc<Self>,
        incoming: Incoming,
        input_timeout: Option<std::time::Duration>,
        slot: Option<&TaskSlot>,
        work: impl FnOnce(TaskLink, Incoming) -> Fut,
    ) -> Option<Outcome>
    where
        Fut: std::future::Future<Output = Outcome>,
    {
        let id = incoming.task_id.clone();
        // Canceled while it waited: it must not run (the cancel recorded it).
        let cancel = self.running(&id)?;
        let link = TaskLink {
            broker: Arc::clone(self),
            task_id: id.clone(),
            context_id: incoming.context_id.clone(),
            input_timeout,
            cancel: cancel.clone(),
            traceparent: incoming.traceparent.clone(),
            started: Arc::default(),
            in_flight: Arc::new(Semaphore::new(UPDATES_IN_FLIGHT)),
        };
        if let Some(slot) = slot {
            *lock(slot) = Some(link.clone());
        }
        let mut work = std::pin::pin!(work(link.clone(), incoming));
        let first = std::future::poll_fn(|cx| std::task::Poll::Ready(work.as_mut().poll(cx)));
        let outcome = match first.await {
            std::task::Poll::Ready(outcome) => outcome,
            std::task::Poll::Pending => match link.mark_working().await {
                Ok(true) => work.await,
                // Ended meanwhile (it cannot start after a cancel; this is a backstop).
                Ok(false) => {
                    cancel.cancel();
                    work.await
                }
                Err(error) => {
                    tracing::warn!(%error, task_id = %id, "cannot record the task as working");
                    cancel.cancel();
                    let _ = work.await;
                    Outcome::Failed("the task store failed; see roostd's log".into())
                }
            },
        };
        if let Some(slot) = slot {
            *lock(slot) = None;
        }
        // The answer and the end are committed together (after any updates
        // still queued).
        let (answer, end, message) = match &outcome {
            Outcome::Completed(text) if text.is_empty() => (None, TaskState::Completed, None),
            Outcome::Completed(text) => (
                Some(EventKind::Artifact {
                    artifact_id: ANSWER_ARTIFACT.into(),
                    text: text.clone(),
                    append: false,
                    last_chunk: true,
                    part: None,
                }),
                TaskState::Completed,
                None,
            ),
            Outcome::Reply(text) => (
                Some(EventKind::Reply { text: text.clone() }),
                TaskState::Completed,
                None,
            ),
            Outcome::Failed(e) => (None, TaskState::Failed, Some(e.as_str())),
            Outcome::Rejected(e) => (None, TaskState::Rejected, Some(e.as_str())),
            Outcome::Canceled => (None, TaskState::Canceled, Some("canceled by the client")),
            Outcome::Stopped => (None, TaskState::Failed, Some("the session was stopped")),
        };
        let status = EventKind::Status {
            state: end,
            message: message.map(str::to_string),
        };
        let mut events = link.first_events();
        events.extend(answer);
        events.push(status);
        let outcome = match self.publish_all(&id, events).await.map(|mut w| w.pop()) {
            Ok(Some(Some(_))) => outcome,
            // It had already ended (an input request timed out): the session
            // sees what the client sees.
            Ok(_) => match self.store.a2a_task(&id).await {
                Ok(Some(t)) if t.state == TaskState::Failed => {
                    Outcome::Failed(t.status_message.unwrap_or_default())
                }
                _ => outcome,
            },
            Err(error) => {
                tracing::warn!(%error, task_id = %id, "cannot record the task's answer and end");
                outcome
            }
        };
        self.done(&id);
        Some(outcome)
    }
}

/// The artifact every completed task has: its answer.
pub const ANSWER_ARTIFACT: &str = "answer";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_and_know_when_they_end() {
        for s in [
            TaskState::Submitted,
            TaskState::Working,
            TaskState::InputRequired,
            TaskState::Completed,
            TaskState::Failed,
            TaskState::Canceled,
            TaskState::Rejected,
        ] {
            assert_eq!(TaskState::parse(s.as_str()), Some(s));
        }
        assert!(TaskState::Canceled.is_terminal());
        assert!(!TaskState::InputRequired.is_terminal());
        assert_eq!(TaskState::parse("nope"), None);
    }
}
