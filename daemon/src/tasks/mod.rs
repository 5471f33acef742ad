//! A2A tasks as roostd knows them, apart from any wire format: states, the
//! per-task event log, and the broker that accepts a task durably, hands it
//! to its session's inbox, fans events out to subscribers and cancels running
//! work. It knows no HTTP (the gateway, `a2a`, renders it) and no SQL: what
//! it keeps durable goes through its port, the task log (`log.rs`).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

mod accept;
mod drowse;
mod handover;
mod hibernate;
mod input;
mod link;
pub mod log;
pub mod model;
mod push;
mod queue;
mod watch;

pub use crate::runtime::{InputError, Outcome, Reply, TaskSlot, trace_id_of};
pub use accept::{NewTask, SubmitError};
pub use input::ResumeError;
use link::working;
pub use link::{INPUT_TIMEOUT, TaskLink};
pub use model::{
    A2aTask, ANSWER_ARTIFACT, EventKind, NEVER_RAN, TaskEvent, TaskState, message_text, parts_text,
};
use queue::Queued;
pub use queue::{InboxRx, Next, Queue};

use crate::ids::TaskId;
pub use log::{LogError, TaskLog};
pub use model::{NewA2aTask, PushConfig, PushDelivery, PushMade, PushVersion, TaskFilter};
/// A task handed to a session.
#[derive(Debug, Clone)]
pub struct Incoming {
    pub task_id: TaskId,
    pub context_id: String,
    pub message_id: String,
    pub text: String,
    /// The message's parts (1.0 Part objects), for a capsule that reads
    /// them (`murmur:a2a@0.2.0`).
    pub parts: Vec<serde_json::Value>,
    /// The W3C `traceparent` the client sent (not kept across restarts).
    pub traceparent: Option<String>,
    /// Recorded `working` already (it went straight to a waiting launch).
    pub working: bool,
    /// The first task a woken session takes: when the wake began (its
    /// latency is counted, and traced under the task).
    pub woke: Option<std::time::Instant>,
}

struct Inbox {
    tx: mpsc::Sender<Box<Incoming>>,
    route: String,
    depth: usize,
    queued: Queued,
    /// How many of the session's launches wait on the inbox right now.
    waiting: Arc<AtomicUsize>,
    /// Cancelled when the session is to take no more tasks but finish
    /// those it runs (a node being drained).
    quiesce: CancellationToken,
    /// What a message on a context with an unended task does.
    same_context: crate::manifest::SameContext,
    /// The session is being upgraded (`handover.rs`): its launch parks the
    /// receiving end here for the next version instead of closing it.
    handover: bool,
    parked: Option<InboxRx>,
    /// The session hibernates (`hibernate.rs`): its inbox is parked and
    /// the next task to arrive wakes it.
    asleep: bool,
    /// When a wake was asked for (one at a time).
    waking: Option<std::time::Instant>,
}

/// The tasks handed to sessions in this process that have not ended, by
/// session and context (what `lifecycle.same_context` reads).
#[derive(Default)]
struct Open {
    by_task: HashMap<TaskId, (String, String)>,
    by_context: HashMap<(String, String), Vec<TaskId>>,
}

impl Open {
    fn add(&mut self, task: &TaskId, session: &str, context: &str) {
        // A launch reads its session's stored tasks again: once is enough.
        if self.by_task.contains_key(task) {
            return;
        }
        let key = (session.to_string(), context.to_string());
        self.by_task.insert(task.clone(), key.clone());
        self.by_context.entry(key).or_default().push(task.clone());
    }

    fn ended(&mut self, task: &str) {
        let Some(key) = self.by_task.remove(task) else {
            return;
        };
        if let Some(tasks) = self.by_context.get_mut(&key) {
            tasks.retain(|t| t.as_str() != task);
            if tasks.is_empty() {
                self.by_context.remove(&key);
            }
        }
    }

    fn of_session(&self, session: &str) -> Vec<TaskId> {
        self.by_task
            .iter()
            .filter(|(_, (s, _))| s == session)
            .map(|(task, _)| task.clone())
            .collect()
    }

    fn of(&self, session: &str, context: &str) -> Vec<TaskId> {
        self.by_context
            .get(&(session.to_string(), context.to_string()))
            .cloned()
            .unwrap_or_default()
    }
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
        let mut live = lock(&self.broker.fan.live);
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

/// Where committed events go: subscribers, and metrics and traces.
struct Fan {
    live: Mutex<LiveTasks>,
    watch: watch::Watch,
    /// Unended tasks by context (a task leaves at its terminal event).
    open: Mutex<Open>,
}

/// Tells a task's subscribers about its committed events (on the task
/// writer's thread, so in log order).
fn fan_out(fan: &Fan, task_id: &str, written: &[Option<TaskEvent>]) {
    let mut live = lock(&fan.live);
    for event in written.iter().flatten() {
        if let Some(tx) = live.get(task_id) {
            let _ = tx.send(event.clone());
        }
        if let EventKind::Status { state, message, .. } = &event.kind
            && state.is_terminal()
        {
            live.remove(task_id);
            lock(&fan.open).ended(task_id);
            fan.watch.ended(task_id, *state, message.as_deref());
        }
    }
}

/// Accepts tasks, delivers them, and fans their events out.
pub struct Broker {
    log: Arc<dyn TaskLog>,
    inboxes: Mutex<HashMap<String, Inbox>>,
    fan: Arc<Fan>,
    /// Tokens of running tasks; a canceled token for a task canceled before
    /// it started (so it never starts).
    running: Mutex<HashMap<TaskId, CancellationToken>>,
    /// Why a task was canceled, when not by its client (its status says).
    cancel_reasons: Mutex<HashMap<TaskId, String>>,
    /// Tasks in input-required, each with where the answer goes.
    waiting: Mutex<HashMap<TaskId, oneshot::Sender<Reply>>>,
    /// Tasks accepted in this process for a session's inbox and not yet
    /// taken: a launch's list of stored tasks leaves them out, so a task is
    /// never both in that list and in the inbox.
    handed: Mutex<HashSet<TaskId>>,
    /// Where a hibernated session's wake is asked for (the supervisor).
    waker: std::sync::OnceLock<mpsc::UnboundedSender<String>>,
    /// The bound on sessions that hibernate awake at once.
    drowse: Arc<drowse::Drowse>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Broker {
    pub fn new(log: Arc<dyn TaskLog>, metrics: Arc<crate::metrics::Metrics>) -> Self {
        Self {
            log,
            inboxes: Mutex::default(),
            fan: Arc::new(Fan {
                live: Mutex::default(),
                watch: watch::Watch::new(metrics),
                open: Mutex::default(),
            }),
            running: Mutex::default(),
            cancel_reasons: Mutex::default(),
            waiting: Mutex::default(),
            handed: Mutex::default(),
            waker: std::sync::OnceLock::new(),
            drowse: drowse::Drowse::new(),
        }
    }

    /// A session starts taking tasks: at most `depth` wait at a time; a
    /// message on a context with an unended task does as `same_context`
    /// says.
    pub fn open_inbox(
        &self,
        session_id: &str,
        route: &str,
        depth: usize,
        same_context: crate::manifest::SameContext,
    ) -> InboxRx {
        let depth = depth.max(1);
        // A new version of an upgraded session takes the inbox its last
        // version parked: what waits there, and what arrives, is its.
        if let Some(rx) = self.take_parked(session_id, depth, same_context) {
            return rx;
        }
        let (inbox, rx) = Inbox::new(route, depth, same_context);
        lock(&self.inboxes).insert(session_id.to_string(), inbox);
        rx
    }

    /// The session takes no more tasks (its launch ends as stopped once
    /// those it runs have finished; those still queued stay queued).
    /// `false` when it has no inbox.
    pub fn quiesce(&self, session_id: &str) -> bool {
        match lock(&self.inboxes).get(session_id) {
            Some(inbox) => {
                inbox.quiesce.cancel();
                true
            }
            None => false,
        }
    }

    /// Each route's tasks waiting for their session (for the metrics).
    pub fn queue_depths(&self) -> Vec<(String, usize)> {
        // Hibernated routes with nothing waiting are left out (there may be
        // a hundred thousand).
        lock(&self.inboxes)
            .values()
            .map(|inbox| (inbox, lock(&inbox.queued).len()))
            .filter(|(inbox, n)| !inbox.asleep || *n > 0)
            .map(|(inbox, n)| (inbox.route.clone(), n))
            .collect()
    }

    /// The metrics the broker counts into.
    pub fn metrics(&self) -> &crate::metrics::Metrics {
        self.fan.watch.metrics()
    }

    /// The count of the session's launches waiting on its inbox (a launch
    /// keeps it up to date while it waits).
    pub fn waiting(&self, session_id: &str) -> Option<Arc<AtomicUsize>> {
        lock(&self.inboxes)
            .get(session_id)
            .map(|inbox| Arc::clone(&inbox.waiting))
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

    /// Appends an event to the task's log and tells its subscribers.
    /// A task that has ended takes no more events (`None`).
    pub async fn publish(
        &self,
        task_id: &TaskId,
        kind: EventKind,
    ) -> Result<Option<TaskEvent>, LogError> {
        Ok(self.publish_all(task_id, vec![kind]).await?.pop().flatten())
    }

    /// Appends events to the task's log in one commit, in order, and tells
    /// its subscribers; each as [`Broker::publish`] would.
    pub async fn publish_all(
        &self,
        task_id: &TaskId,
        kinds: Vec<EventKind>,
    ) -> Result<Vec<Option<TaskEvent>>, LogError> {
        let (reply, answer) = oneshot::channel();
        let fan = Arc::clone(&self.fan);
        let id = task_id.clone();
        self.log.append_then(
            task_id,
            kinds,
            true,
            Box::new(move |written| {
                if let Ok(events) = &written {
                    fan_out(&fan, &id, events);
                }
                let _ = reply.send(written);
            }),
        );
        // A log that is gone or hangs is an error, never a wait without end.
        let deadline = self.log.write_deadline();
        match tokio::time::timeout(deadline, answer).await {
            Ok(Ok(written)) => written,
            Ok(Err(_)) => Err(LogError::Stopped),
            Err(_) => Err(LogError::Timeout(deadline)),
        }
    }

    /// Queues events for the task's log without waiting; its subscribers
    /// hear of them once they are committed, and `permit` is released then.
    /// A failure leaves a hole in the task's log: the writer then refuses
    /// to end it completed (`Broker::serve` ends it failed instead).
    fn publish_queued(
        &self,
        task_id: &TaskId,
        kinds: Vec<EventKind>,
        permit: OwnedSemaphorePermit,
    ) {
        let fan = Arc::clone(&self.fan);
        let id = task_id.clone();
        self.log.append_then(
            task_id,
            kinds,
            false,
            Box::new(move |written| {
                match &written {
                    Ok(events) => fan_out(&fan, &id, events),
                    Err(error) => {
                        tracing::error!(%error, task_id = %id, "cannot record a task update: the task will not end completed");
                    }
                }
                drop(permit);
            }),
        );
    }

    /// Ends a task in `state` with an optional status message.
    pub async fn finish(
        &self,
        task_id: &TaskId,
        state: TaskState,
        message: Option<&str>,
    ) -> Result<Option<TaskEvent>, LogError> {
        self.publish(
            task_id,
            EventKind::Status {
                parts: None,
                state,
                message: message.map(str::to_string),
            },
        )
        .await
    }

    /// Live events of a task from now on (replay the log from the store first).
    pub fn subscribe(self: &Arc<Self>, task_id: &str) -> Subscription {
        let rx = lock(&self.fan.live)
            .entry(task_id.to_string())
            .or_insert_with(|| broadcast::channel(64).0)
            .subscribe();
        Subscription {
            rx,
            broker: Arc::clone(self),
            task_id: task_id.to_string(),
        }
    }

    /// Stops relaying to queued sessions' inbox without failing its tasks
    /// (a shutdown: they stay queued and are delivered after the restart).
    pub fn detach_inbox(&self, session_id: &str) {
        let mut inboxes = lock(&self.inboxes);
        if !inboxes
            .get(session_id)
            .is_some_and(|i| i.handover || i.asleep)
        {
            inboxes.remove(session_id);
        }
    }

    /// Registers a delivered task as running: its cancel token (cancelled
    /// by [`Broker::cancel`]), or `None` when it must not run: it was
    /// canceled before it started, or it is running already (a task is
    /// delivered to one run only; this is the backstop).
    pub fn running(&self, task_id: &str) -> Option<CancellationToken> {
        lock(&self.handed).remove(task_id);
        self.fan.watch.taken(task_id);
        let mut running = lock(&self.running);
        match running.get(task_id) {
            Some(token) if token.is_cancelled() => {
                running.remove(task_id);
                return None;
            }
            Some(_) => {
                tracing::error!(%task_id, "a task was delivered twice; the second is dropped");
                return None;
            }
            None => {}
        }
        let token = CancellationToken::new();
        running.insert(TaskId::from(task_id), token.clone());
        Some(token)
    }

    pub fn done(&self, task_id: &str) {
        lock(&self.running).remove(task_id);
    }

    /// Cancels a task that has not ended, as [`Broker::cancel`] does, with
    /// `reason` as its status message instead of "canceled by the client".
    pub async fn cancel_because(&self, task_id: &TaskId, reason: String) -> Result<(), LogError> {
        lock(&self.cancel_reasons).insert(task_id.clone(), reason);
        self.cancel(task_id).await
    }

    /// Why a task was canceled: the reason it was given, else by its client.
    pub(crate) fn cancel_reason(&self, task_id: &str) -> String {
        lock(&self.cancel_reasons)
            .remove(task_id)
            .unwrap_or_else(|| "canceled by the client".into())
    }

    /// Cancels a task that has not ended: a running one is interrupted, a
    /// waiting one is marked canceled (its session skips it).
    pub async fn cancel(&self, task_id: &TaskId) -> Result<(), LogError> {
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
                    running.insert(task_id.clone(), token);
                    true
                }
            }
        };
        if waiting {
            // Its queue slot is free at once, though its session skips it
            // only when it gets there.
            for inbox in lock(&self.inboxes).values() {
                lock(&inbox.queued).remove(task_id);
            }
            let reason = self.cancel_reason(task_id);
            let ended = self
                .finish(task_id, TaskState::Canceled, Some(&reason))
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
    pub async fn recover(&self) -> Result<usize, LogError> {
        let ids = self
            .log
            .ids_in(&[TaskState::Working, TaskState::InputRequired], false)
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
    pub async fn fail_orphans(&self) -> Result<usize, LogError> {
        let ids = self.log.ids_in(&[TaskState::Submitted], true).await?;
        Ok(self
            .fail_all(ids, "its session did not come back after roostd restarted")
            .await)
    }

    /// Fails each task with `why` (an error is logged and the rest go on);
    /// returns how many were failed.
    pub async fn fail_all(&self, ids: impl IntoIterator<Item = TaskId>, why: &str) -> usize {
        let mut failed = 0;
        for id in ids {
            self.done(&id);
            lock(&self.handed).remove(&id);
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
        match self.log.pending(session_id).await {
            Ok(tasks) => tasks
                .into_iter()
                .filter(|t| !lock(&self.handed).contains(&t.id))
                .inspect(|t| lock(&self.fan.open).add(&t.id, session_id, &t.context_id))
                .map(|t| Incoming {
                    task_id: t.id,
                    context_id: t.context_id,
                    message_id: t.message_id,
                    text: t.text,
                    parts: t.parts,
                    traceparent: None,
                    working: false,
                    woke: None,
                })
                .collect(),
            Err(error) => {
                tracing::error!(%error, "cannot read queued tasks");
                Vec::new()
            }
        }
    }

    /// A stored task (the A2A gateway's reads go through the broker, never
    /// to the store).
    /// Who sent a context's tasks on a route, if it has any.
    pub async fn context_owner(
        &self,
        route: &str,
        context_id: &str,
    ) -> Result<Option<String>, LogError> {
        self.log.context_owner(route, context_id).await
    }

    pub async fn task(&self, id: &TaskId) -> Result<Option<A2aTask>, LogError> {
        self.log.task(id).await
    }

    /// A task's logged events after `after` (0: all), in order.
    pub async fn events(&self, task_id: &TaskId, after: u64) -> Result<Vec<TaskEvent>, LogError> {
        self.log.events(task_id, after).await
    }

    /// Stored tasks matching `filter`, and how many match in all.
    pub async fn tasks(&self, filter: &TaskFilter<'_>) -> Result<(Vec<A2aTask>, u64), LogError> {
        self.log.tasks(filter).await
    }
}

#[cfg(test)]
mod tests;
