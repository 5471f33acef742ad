//! The broker's side of push notifications: a task's configs as the gateway
//! creates, reads and deletes them, and the outbox the deliverer
//! (`a2a::push`) drains (the task log keeps both).

use std::sync::Arc;

use super::Broker;
use super::{LogError, PushConfig, PushDelivery, PushMade};
use crate::ids::TaskId;

impl Broker {
    /// Adds or replaces a config of a task; `backfill`: the events it has
    /// logged so far are delivered too; refused when the task is gone or
    /// has `max` configs besides this one.
    pub async fn create_push_config(
        &self,
        config: &PushConfig,
        backfill: bool,
        max: u32,
    ) -> Result<PushMade, LogError> {
        self.log.create_push_config(config, backfill, max).await
    }

    pub async fn push_configs(&self, task_id: &TaskId) -> Result<Vec<PushConfig>, LogError> {
        self.log.push_configs(task_id).await
    }

    /// `false` when the task had no config by that id.
    pub async fn delete_push_config(&self, task_id: &TaskId, id: &str) -> Result<bool, LogError> {
        self.log.delete_push_config(task_id, id).await
    }

    /// Deliveries due by `now_ms`: each config's next one, oldest first.
    pub async fn due_pushes(&self, now_ms: i64, limit: u32) -> Result<Vec<PushDelivery>, LogError> {
        self.log.due_pushes(now_ms, limit).await
    }

    /// When the next queued delivery is due (unix ms).
    pub async fn next_push_at(&self) -> Result<Option<i64>, LogError> {
        self.log.next_push_at().await
    }

    pub async fn push_done(&self, outbox_id: i64) -> Result<(), LogError> {
        self.log.push_done(outbox_id).await
    }

    pub async fn push_retry(
        &self,
        outbox_id: i64,
        next_at: i64,
        error: &str,
    ) -> Result<(), LogError> {
        self.log.push_retry(outbox_id, next_at, error).await
    }

    /// Woken after a commit that queued deliveries (an event of a task with
    /// configs, or a new config's backfill).
    pub fn push_wake(&self) -> Arc<tokio::sync::Notify> {
        self.log.push_wake()
    }
}
