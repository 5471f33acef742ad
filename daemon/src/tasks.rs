//! A2A tasks as roostd knows them, apart from any wire format: states, the
//! per-task event log, and the broker that accepts a task durably, hands it
//! to its session's inbox, fans events out to subscribers and cancels running
//! work. It knows no HTTP (the gateway, `a2a`, renders it) and no SQL (`store`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, mpsc};
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
    /// Text of the task's artifact (the answer), whole or in chunks.
    Artifact {
        artifact_id: String,
        text: String,
        #[serde(default)]
        append: bool,
        #[serde(default)]
        last_chunk: bool,
    },
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

/// A task handed to a session.
#[derive(Debug, Clone)]
pub struct Incoming {
    pub task_id: String,
    pub context_id: String,
    pub text: String,
}

/// Why a task was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error(
        "session '{route}' takes no A2A tasks (its lifecycle task_acceptance is none, or it is not an agent)"
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

/// What a new task starts from.
pub struct NewTask<'a> {
    pub session_id: &'a str,
    pub route: &'a str,
    pub message_id: &'a str,
    pub context_id: Option<&'a str>,
    pub text: &'a str,
    /// The message as received (kept with the task).
    pub message_json: &'a str,
}

struct Inbox {
    tx: mpsc::Sender<Incoming>,
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

/// Accepts tasks, delivers them, and fans their events out.
pub struct Broker {
    store: Store,
    inboxes: Mutex<HashMap<String, Inbox>>,
    live: Mutex<HashMap<String, broadcast::Sender<TaskEvent>>>,
    running: Mutex<HashMap<String, CancellationToken>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Broker {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            inboxes: Mutex::default(),
            live: Mutex::default(),
            running: Mutex::default(),
        }
    }

    /// A session starts taking tasks: at most `depth` wait at a time.
    pub fn open_inbox(&self, session_id: &str, depth: usize) -> mpsc::Receiver<Incoming> {
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
    pub async fn close_inbox(&self, session_id: &str, mut rx: mpsc::Receiver<Incoming>) {
        lock(&self.inboxes).remove(session_id);
        rx.close();
        let mut waiting = Vec::new();
        while let Some(task) = rx.recv().await {
            waiting.push(task.task_id);
        }
        self.fail_all(waiting, NEVER_RAN).await;
    }

    /// Records the task and its first message, then hands it to the session:
    /// the caller may acknowledge only after this returns `Ok`.
    pub async fn submit(&self, new: NewTask<'_>) -> Result<A2aTask, SubmitError> {
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
        let task = self
            .store
            .insert_a2a_task(&NewA2aTask {
                id: &task_id,
                session_id: new.session_id,
                route: new.route,
                context_id: &context_id,
                message_id: new.message_id,
                text: new.text,
                message_json: new.message_json,
            })
            .await?;
        permit.send(Incoming {
            task_id,
            context_id,
            text: new.text.to_string(),
        });
        Ok(task)
    }

    /// Appends an event to the task's log and tells its subscribers.
    /// A task that has ended takes no more events (`None`).
    pub async fn publish(
        &self,
        task_id: &str,
        kind: EventKind,
        answer: Option<&str>,
    ) -> Result<Option<TaskEvent>, StoreError> {
        let Some(event) = self.store.append_task_event(task_id, &kind, answer).await? else {
            return Ok(None);
        };
        let terminal = matches!(&kind, EventKind::Status { state, .. } if state.is_terminal());
        let mut live = lock(&self.live);
        if let Some(tx) = live.get(task_id) {
            let _ = tx.send(event.clone());
        }
        if terminal {
            live.remove(task_id);
        }
        Ok(Some(event))
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
            None,
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

    /// Stops relaying to queued sessions' inbox without failing its tasks
    /// (a shutdown: they stay queued and are delivered after the restart).
    pub fn detach_inbox(&self, session_id: &str) {
        lock(&self.inboxes).remove(session_id);
    }

    /// A session starts running a task: the token is cancelled by [`Broker::cancel`].
    pub fn running(&self, task_id: &str) -> CancellationToken {
        let token = CancellationToken::new();
        lock(&self.running).insert(task_id.to_string(), token.clone());
        token
    }

    pub fn done(&self, task_id: &str) {
        lock(&self.running).remove(task_id);
    }

    /// Cancels a task that has not ended: a running one is interrupted, a
    /// waiting one is marked canceled (its session skips it).
    pub async fn cancel(&self, task_id: &str) -> Result<(), StoreError> {
        let token = lock(&self.running).get(task_id).cloned();
        match token {
            Some(token) => token.cancel(),
            None => {
                self.finish(task_id, TaskState::Canceled, Some("canceled by the client"))
                    .await?;
            }
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
                    text: t.text,
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
}

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
