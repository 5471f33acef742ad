//! The broker's port to durable task state, [`TaskLog`]: new tasks recorded
//! (de-duplicated by route, client and message id), their events appended in
//! order, tasks, events and pages of tasks read back, and the push outbox.
//! The broker knows only this trait; `log/sqlite.rs` is the one-host
//! implementation on roostd's SQLite store, and a cluster's lives beside it.

mod sqlite;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use super::model::{
    A2aTask, EventKind, NewA2aTask, PushConfig, PushDelivery, PushMade, TaskEvent, TaskFilter,
    TaskState,
};
use crate::ids::TaskId;
use crate::runtime::PortError;

/// The task log failed; the implementation's error is the source.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// It did not answer by its deadline ([`TaskLog::write_deadline`]).
    #[error("the task log did not answer within {} s", .0.as_secs())]
    Timeout(Duration),
    /// It has stopped (roostd is shutting down, or its writer died).
    #[error("the task log has stopped")]
    Stopped,
    #[error(transparent)]
    Failed(PortError),
}

/// What became of a new task's record its caller waited for.
pub enum Inserted {
    /// Committed (`true`), or not written because the route already had a
    /// task of this client for the message id (`false`).
    Committed(bool),
    /// The log had not taken it by the deadline: it was withdrawn, and
    /// nothing of it will be written.
    Withdrawn,
    /// The log took it but has not said how it went by a second deadline:
    /// it may yet be committed; awaiting this tells, however long it takes.
    Unknown(BoxFuture<'static, Result<bool, LogError>>),
}

/// A new task's record on its way into the log: awaiting it waits for the
/// log's deadline, then withdraws the record if the log has not taken it
/// (so a caller that gives up never has it written later).
pub type Insertion = BoxFuture<'static, Result<Inserted, LogError>>;

/// What an appended batch of events became: each event as logged, or `None`
/// for one the task took no more (it had ended).
pub type Appended = Result<Vec<Option<TaskEvent>>, LogError>;

/// Called once a batch of events is in the log (or failed), in log order.
pub type AppendThen = Box<dyn FnOnce(Appended) + Send + 'static>;

/// Durable task state, as the broker needs it. Every method's promise is
/// the store's today: a record the log says is committed survives a crash;
/// events of one task are logged, and their `then` called, in order.
#[async_trait::async_trait]
pub trait TaskLog: Send + Sync + 'static {
    /// Queues a new task's record (state `submitted`, or `working` too when
    /// it goes straight to a launch that waits): the task as it will read,
    /// and its [`Insertion`]. `dedupe`: a message id the route already has
    /// a task of this client for writes nothing.
    fn insert(&self, task: &NewA2aTask<'_>, working: bool, dedupe: bool) -> (A2aTask, Insertion);

    /// The task a retried message id already has on `(route, owner)`.
    async fn retried(&self, route: (&str, &str), message_id: &str) -> Result<A2aTask, LogError>;

    /// Appends events to a task's log in one commit, in order, then calls
    /// `then` (after everything queued before). Unless `urgent`, the commit
    /// may wait a moment for other writes to share its sync.
    fn append_then(&self, task_id: &TaskId, kinds: Vec<EventKind>, urgent: bool, then: AppendThen);

    async fn task(&self, id: &TaskId) -> Result<Option<A2aTask>, LogError>;

    /// A task's events after `after` (a sequence number), in order.
    async fn events(&self, id: &TaskId, after: u64) -> Result<Vec<TaskEvent>, LogError>;

    /// A page of the tasks `filter` names, and how many match in all.
    async fn tasks(&self, filter: &TaskFilter<'_>) -> Result<(Vec<A2aTask>, u64), LogError>;

    /// Tasks in `states`, oldest first; with `ended_sessions`, only those
    /// whose session is no longer live.
    async fn ids_in(
        &self,
        states: &[TaskState],
        ended_sessions: bool,
    ) -> Result<Vec<TaskId>, LogError>;

    /// Tasks accepted for a session that never started, oldest first.
    async fn pending(&self, session_id: &str) -> Result<Vec<A2aTask>, LogError>;

    /// The client whose conversation `context_id` is on `route`, if any.
    async fn context_owner(
        &self,
        route: &str,
        context_id: &str,
    ) -> Result<Option<String>, LogError>;

    /// How long a write may take before its caller gives up.
    fn write_deadline(&self) -> Duration;

    /// Adds or replaces a task's push config, unless the task is gone or
    /// has `max` others; `backfill` queues what it logged so far for it.
    async fn create_push_config(
        &self,
        config: &PushConfig,
        backfill: bool,
        max: u32,
    ) -> Result<PushMade, LogError>;

    async fn push_configs(&self, task_id: &TaskId) -> Result<Vec<PushConfig>, LogError>;

    /// `true` if there was such a config.
    async fn delete_push_config(&self, task_id: &TaskId, id: &str) -> Result<bool, LogError>;

    /// Deliveries due at `now_ms` (unix ms), at most `limit`, oldest first.
    async fn due_pushes(&self, now_ms: i64, limit: u32) -> Result<Vec<PushDelivery>, LogError>;

    /// When the next delivery is due, if any is queued.
    async fn next_push_at(&self) -> Result<Option<i64>, LogError>;

    async fn push_done(&self, outbox_id: i64) -> Result<(), LogError>;

    async fn push_retry(&self, outbox_id: i64, next_at: i64, error: &str) -> Result<(), LogError>;

    /// Notified when deliveries are queued.
    fn push_wake(&self) -> Arc<tokio::sync::Notify>;
}
