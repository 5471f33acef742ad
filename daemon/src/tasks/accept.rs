//! Accepting a task: its record is committed before its client or its
//! session hears of it, and a record the store did not take by its
//! deadline is withdrawn (nothing of it runs) — or, if the store took it and
//! is slow to say so, the client is told the task's state is unknown (with
//! its id) and the task is handed on if it commits. Never an error for a
//! task that then runs.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::mpsc;

use super::LogError;
use super::log::Inserted;
use super::model::NewA2aTask;
use super::{A2aTask, Broker, Incoming, Subscription, TaskEvent, fan_out, lock, watch, working};
use crate::ids::TaskId;

/// Why a task was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error(
        "session '{route}' takes no A2A tasks (its lifecycle task_acceptance is none, or it is a \
         script capsule that does not export murmur:a2a/handler)"
    )]
    NotAccepting { route: String },
    #[error(
        "session '{route}' already has {depth} tasks waiting (lifecycle.queue_depth); try again \
         after one finishes"
    )]
    QueueFull { route: String, depth: usize },
    /// The store had not taken the record when the writer's deadline
    /// passed: it was withdrawn, and nothing of it will run.
    #[error(
        "the task store did not take the task within {} s; it was withdrawn and will not run: \
         send it again",
        secs.as_secs()
    )]
    Withdrawn { secs: std::time::Duration },
    /// The store took the record but had not said whether it was committed
    /// by a second deadline. It is handed to its session if it commits.
    #[error(
        "the task store had not confirmed task '{task_id}' after {} s: it may still be \
         accepted and run; GetTask '{task_id}' tells (sending the same messageId again \
         answers with it)",
        secs.as_secs()
    )]
    Unknown {
        task_id: TaskId,
        secs: std::time::Duration,
    },
    #[error(
        "context '{context_id}' of session '{route}' has task '{task_id}' still running, and \
         this capsule takes one message at a time per context (lifecycle.same_context: \
         reject): wait for that task to end, or cancel it, then send again"
    )]
    ContextBusy {
        route: String,
        context_id: String,
        task_id: TaskId,
    },
    #[error(transparent)]
    Log(#[from] LogError),
}

/// What a new task starts from.
pub struct NewTask<'a> {
    pub session_id: &'a str,
    pub route: &'a str,
    /// The client that sent it ('' for a route's one token).
    pub owner: &'a str,
    pub message_id: &'a str,
    pub context_id: Option<&'a str>,
    pub text: &'a str,
    /// The message as received (kept with the task).
    pub message_json: &'a str,
    /// Its parts, as in `message_json`.
    pub parts: &'a [serde_json::Value],
    /// The W3C `traceparent` the client sent, if any.
    pub traceparent: Option<&'a str>,
    /// A message id this route has a task for gets that task, and nothing
    /// runs again (`a2a.dedupe_message_ids`).
    pub dedupe: bool,
    /// The schedule tick (schedule id, unix ms) it fires: recorded in the
    /// same commit as the task.
    pub tick: Option<(&'a str, i64)>,
}

impl Broker {
    /// Records the task and its first message, then hands it to the
    /// session: the caller may acknowledge only after this returns `Ok` (the
    /// record is committed). An `Err` means the task was not handed on and
    /// will not run — except [`SubmitError::Unknown`], which names the task:
    /// the store took the record and is slow to say so, and the task is
    /// handed on if it commits. The subscription to its events exists before the
    /// session has it, so no event can be missed. A message the route
    /// already has a task for (same `messageId`) gets that task and no
    /// subscription (its log is read instead), and runs nothing.
    pub async fn submit(
        self: &Arc<Self>,
        new: NewTask<'_>,
    ) -> Result<(A2aTask, Option<Subscription>), SubmitError> {
        let permit_tx = {
            let inboxes = lock(&self.inboxes);
            let inbox = inboxes
                .get(new.session_id)
                .ok_or_else(|| SubmitError::NotAccepting {
                    route: new.route.to_string(),
                })?;
            // Straight to a launch that waits for it: nothing else is queued
            // and a launch is waiting.
            let direct = inbox.waiting.load(Ordering::Acquire) > 0
                && inbox.tx.capacity() == inbox.tx.max_capacity();
            (
                inbox.tx.clone(),
                inbox.depth,
                Arc::clone(&inbox.queued),
                direct,
                inbox.same_context,
            )
        };
        let (tx, depth, queued, direct, same_context) = permit_tx;
        // Double-texting: the tasks of this context that have not ended.
        let busy = match (same_context, new.context_id) {
            (crate::manifest::SameContext::Queue, _) | (_, None) => Vec::new(),
            (_, Some(context)) => lock(&self.fan.open).of(new.session_id, context),
        };
        if same_context == crate::manifest::SameContext::Reject
            && let (Some(task_id), Some(context)) = (busy.first(), new.context_id)
        {
            return Err(SubmitError::ContextBusy {
                route: new.route.to_string(),
                context_id: context.to_string(),
                task_id: task_id.clone(),
            });
        }
        // A task waiting in the inbox for a launch that waits is not
        // "direct" when an interrupted one is still to end before it.
        let direct = direct && busy.is_empty();
        let full = || SubmitError::QueueFull {
            route: new.route.to_string(),
            depth,
        };
        let permit = tx.try_reserve_owned().map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => full(),
            mpsc::error::TrySendError::Closed(_) => SubmitError::NotAccepting {
                route: new.route.to_string(),
            },
        })?;
        let task_id = TaskId::generate();
        {
            let mut queued = lock(&queued);
            if queued.len() >= depth {
                return Err(full());
            }
            queued.insert(task_id.clone());
        }
        let context_id = new
            .context_id
            .map(str::to_string)
            .unwrap_or_else(|| format!("ctx_{}", uuid::Uuid::now_v7().simple()));
        // Marked before its row can be seen, so that a launch reading the
        // session's stored tasks leaves it to the inbox.
        lock(&self.handed).insert(task_id.clone());
        // A task for a launch that waits is recorded `working` in the same
        // commit (one commit fewer; should the launch have taken another
        // task meanwhile and roostd die before it starts this one, it fails
        // visibly as interrupted instead of running after the restart).
        let (task, insert) = self.log.insert(
            &NewA2aTask {
                id: &task_id,
                session_id: new.session_id,
                route: new.route,
                owner: new.owner,
                context_id: &context_id,
                message_id: new.message_id,
                text: new.text,
                message_json: new.message_json,
                parts: new.parts,
                tick: new.tick,
            },
            direct,
            new.dedupe,
        );
        let live = self.subscribe(&task_id);
        let made = match insert.await {
            Ok(Inserted::Committed(made)) => Ok(made),
            Ok(Inserted::Withdrawn) => {
                lock(&self.handed).remove(&task_id);
                lock(&queued).remove(&task_id);
                tracing::error!(task_id = %task_id, route = new.route, "the task store did not take a new task in time: withdrawn, the client told so");
                return Err(SubmitError::Withdrawn {
                    secs: self.log.write_deadline(),
                });
            }
            Ok(Inserted::Unknown(pending)) => {
                // The client hears "unknown" with the task's id; the task is
                // handed on if (when) its record commits.
                tracing::error!(task_id = %task_id, route = new.route, "the task store is slow to commit a new task: the client was told its state is unknown");
                let broker = Arc::clone(self);
                let accepted = Accepted::of(&new, &task, direct);
                let task_id = task_id.clone();
                tokio::spawn(async move {
                    let made = pending.await;
                    if let Ok(true) = made {
                        broker.hand_off(accepted, permit);
                    } else {
                        lock(&broker.handed).remove(&task_id);
                        lock(&queued).remove(&task_id);
                        tracing::warn!(task_id = %task_id, ?made, "a task whose state was unknown was not recorded after all");
                    }
                    drop(live);
                });
                return Err(SubmitError::Unknown {
                    task_id: task.id,
                    secs: self.log.write_deadline() * 2,
                });
            }
            Err(error) => Err(error),
        };
        match made {
            Ok(true) => {}
            // A retry of a message this route has a task for: that task,
            // and nothing runs again.
            Ok(false) => {
                lock(&self.handed).remove(&task_id);
                lock(&queued).remove(&task_id);
                drop(live);
                let seen = self
                    .log
                    .retried((new.route, new.owner), new.message_id)
                    .await?;
                tracing::info!(task_id = %seen.id, message_id = new.message_id,
                    "a message this route already has a task for: its task, not a new run");
                return Ok((seen, None));
            }
            Err(error) => {
                lock(&self.handed).remove(&task_id);
                lock(&queued).remove(&task_id);
                return Err(error.into());
            }
        }
        // `interrupt`: the context's unended tasks are canceled once the new
        // one is recorded (so a failed record leaves them running).
        for old in &busy {
            let reason = format!(
                "canceled: a newer message in its context (task {}) interrupted it \
                 (lifecycle.same_context: interrupt)",
                task.id
            );
            tracing::info!(task_id = %old, newer = %task.id, context_id = %task.context_id,
                "a newer message interrupts a task of its context");
            if let Err(error) = self.cancel_because(old, reason).await {
                tracing::warn!(%error, task_id = %old, "cannot cancel the interrupted task");
            }
        }
        self.hand_off(Accepted::of(&new, &task, direct), permit);
        Ok((task, Some(live)))
    }

    /// A committed task, to its session: the watchers hear it was accepted
    /// (and, when it went straight to a waiting launch, that it works).
    fn hand_off(&self, a: Accepted, permit: mpsc::OwnedPermit<Box<Incoming>>) {
        lock(&self.fan.open).add(&a.task_id, &a.session_id, &a.context_id);
        let traceparent = self.fan.watch.accepted(&watch::Accepted {
            task_id: &a.task_id,
            route: &a.route,
            session_id: &a.session_id,
            context_id: &a.context_id,
            traceparent: a.traceparent.as_deref(),
        });
        if a.direct {
            // Subscribers hear of `working` before anything the session does.
            let working = TaskEvent {
                seq: 2,
                at: a.created_at.clone(),
                kind: working(),
            };
            fan_out(&self.fan, &a.task_id, &[Some(working)]);
        }
        // Handed to the session only once its record is committed: a task
        // that runs is always a task the client was told about.
        let session_id = a.session_id;
        permit.send(Box::new(Incoming {
            task_id: a.task_id,
            context_id: a.context_id,
            message_id: a.message_id,
            text: a.text,
            parts: a.parts,
            traceparent,
            working: a.direct,
            woke: None,
        }));
        // A hibernated session's task wakes it (sent first, so the wake
        // finds it waiting).
        self.wake_if_asleep(&session_id);
    }
}

/// What the hand-off of a committed task needs, owned (it may happen after
/// the request that made the task has been answered).
struct Accepted {
    task_id: TaskId,
    route: String,
    session_id: String,
    context_id: String,
    message_id: String,
    text: String,
    parts: Vec<serde_json::Value>,
    traceparent: Option<String>,
    created_at: String,
    direct: bool,
}

impl Accepted {
    fn of(new: &NewTask<'_>, task: &A2aTask, direct: bool) -> Self {
        Self {
            task_id: task.id.clone(),
            route: new.route.to_string(),
            session_id: new.session_id.to_string(),
            context_id: task.context_id.clone(),
            message_id: new.message_id.to_string(),
            text: new.text.to_string(),
            parts: task.parts.clone(),
            traceparent: new.traceparent.map(str::to_string),
            created_at: task.created_at.clone(),
            direct,
        }
    }
}
