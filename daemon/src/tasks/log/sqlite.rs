//! The task log on one host: roostd's SQLite [`Store`] (its one writer
//! thread, group commit, the push outbox), as it has always been.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;

use super::{
    AppendThen, Inserted, Insertion, LogError, NewA2aTask, PushConfig, PushDelivery, PushMade,
    TaskFilter, TaskLog,
};
use crate::ids::TaskId;
use crate::store::{Store, StoreError};
use crate::tasks::model::{A2aTask, EventKind, TaskEvent, TaskState};

impl From<StoreError> for LogError {
    fn from(e: StoreError) -> Self {
        LogError::Failed(Box::new(e))
    }
}

#[async_trait::async_trait]
impl TaskLog for Store {
    fn insert(&self, task: &NewA2aTask<'_>, working: bool, dedupe: bool) -> (A2aTask, Insertion) {
        let (task, insert) = self.queue_a2a_task(task, working, dedupe);
        let insertion = async move {
            Ok(match insert.wait().await? {
                crate::store::Inserted::Committed(made) => Inserted::Committed(made),
                crate::store::Inserted::Withdrawn => Inserted::Withdrawn,
                crate::store::Inserted::Unknown(pending) => {
                    Inserted::Unknown(pending.outcome().map(|o| Ok(o?)).boxed())
                }
            })
        };
        (task, insertion.boxed())
    }

    async fn retried(&self, route: (&str, &str), message_id: &str) -> Result<A2aTask, LogError> {
        Ok(self.retried_a2a_task(route, message_id).await?)
    }

    fn append_then(&self, task_id: &TaskId, kinds: Vec<EventKind>, urgent: bool, then: AppendThen) {
        self.append_task_events_then(task_id, kinds, urgent, move |written| {
            then(written.map_err(LogError::from));
        });
    }

    async fn task(&self, id: &TaskId) -> Result<Option<A2aTask>, LogError> {
        Ok(self.a2a_task(id).await?)
    }

    async fn events(&self, id: &TaskId, after: u64) -> Result<Vec<TaskEvent>, LogError> {
        Ok(self.task_events(id, after).await?)
    }

    async fn tasks(&self, filter: &TaskFilter<'_>) -> Result<(Vec<A2aTask>, u64), LogError> {
        Ok(self.a2a_tasks(filter).await?)
    }

    async fn ids_in(
        &self,
        states: &[TaskState],
        ended_sessions: bool,
    ) -> Result<Vec<TaskId>, LogError> {
        let ids = self.a2a_task_ids(states, ended_sessions).await?;
        Ok(ids.into_iter().map(TaskId::from).collect())
    }

    async fn pending(&self, session_id: &str) -> Result<Vec<A2aTask>, LogError> {
        Ok(self.pending_a2a_tasks(session_id).await?)
    }

    async fn context_owner(
        &self,
        route: &str,
        context_id: &str,
    ) -> Result<Option<String>, LogError> {
        Ok(Store::context_owner(self, route, context_id).await?)
    }

    fn write_deadline(&self) -> Duration {
        Store::write_deadline(self)
    }

    async fn create_push_config(
        &self,
        config: &PushConfig,
        backfill: bool,
        max: u32,
    ) -> Result<PushMade, LogError> {
        Ok(Store::create_push_config(self, config, backfill, max).await?)
    }

    async fn push_configs(&self, task_id: &TaskId) -> Result<Vec<PushConfig>, LogError> {
        Ok(Store::push_configs(self, task_id).await?)
    }

    async fn delete_push_config(&self, task_id: &TaskId, id: &str) -> Result<bool, LogError> {
        Ok(Store::delete_push_config(self, task_id, id).await?)
    }

    async fn due_pushes(&self, now_ms: i64, limit: u32) -> Result<Vec<PushDelivery>, LogError> {
        Ok(Store::due_pushes(self, now_ms, limit).await?)
    }

    async fn next_push_at(&self) -> Result<Option<i64>, LogError> {
        Ok(Store::next_push_at(self).await?)
    }

    async fn push_done(&self, outbox_id: i64) -> Result<(), LogError> {
        Ok(Store::push_done(self, outbox_id).await?)
    }

    async fn push_retry(&self, outbox_id: i64, next_at: i64, error: &str) -> Result<(), LogError> {
        Ok(Store::push_retry(self, outbox_id, next_at, error).await?)
    }

    fn push_wake(&self) -> Arc<tokio::sync::Notify> {
        Store::push_wake(self)
    }
}
