//! A2A push notification configs and the outbox of their deliveries in the
//! store: configs per task, and the due deliveries read back; written
//! through the task writer as `push_writes.rs` says.

use sqlx::Row;

use super::push_writes::PushWrite;
pub use super::push_writes::now_ms;
use super::writer::WriteOp;
use super::{Store, StoreError};
use crate::tasks::model::{PushConfig, PushDelivery, PushMade, PushVersion};

const CONFIG_COLUMNS: &str = "task_id, id, url, token, auth_scheme, auth_credentials, version";

fn config_from_row(r: &sqlx::sqlite::SqliteRow) -> Result<PushConfig, StoreError> {
    Ok(PushConfig {
        task_id: r.try_get::<String, _>("task_id")?.into(),
        id: r.try_get("id")?,
        url: r.try_get("url")?,
        token: r.try_get("token")?,
        auth_scheme: r.try_get("auth_scheme")?,
        auth_credentials: r.try_get("auth_credentials")?,
        version: PushVersion::parse(&r.try_get::<String, _>("version")?),
    })
}

impl Store {
    async fn push_write(&self, write: PushWrite) -> Result<u64, StoreError> {
        self.write_one(WriteOp::Push(write)).await
    }

    /// Adds or replaces a task's config, unless the task is gone or has
    /// `max` others.
    pub async fn create_push_config(
        &self,
        config: &PushConfig,
        backfill: bool,
        max: u32,
    ) -> Result<PushMade, StoreError> {
        let write = PushWrite::Create {
            config: config.clone(),
            backfill,
            max,
        };
        Ok(super::push_writes::push_made(self.push_write(write).await?))
    }

    /// Deletes a task's config; `false` when it had none by that id.
    pub async fn delete_push_config(&self, task_id: &str, id: &str) -> Result<bool, StoreError> {
        let write = PushWrite::Delete {
            task_id: task_id.to_string(),
            id: id.to_string(),
        };
        Ok(self.push_write(write).await? > 0)
    }

    /// A task's configs, by id.
    pub async fn push_configs(&self, task_id: &str) -> Result<Vec<PushConfig>, StoreError> {
        let sql =
            format!("SELECT {CONFIG_COLUMNS} FROM push_configs WHERE task_id = ?1 ORDER BY id");
        let rows = sqlx::query(&sql)
            .bind(task_id)
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(config_from_row).collect()
    }

    /// Deliveries due by `now_ms`, at most `limit`: for each config only
    /// its first event not yet delivered (so each receiver gets a task's
    /// events in log order).
    pub async fn due_pushes(
        &self,
        now_ms: i64,
        limit: u32,
    ) -> Result<Vec<PushDelivery>, StoreError> {
        let rows = sqlx::query(
            "SELECT o.id AS outbox_id, o.event_seq, o.attempts, c.task_id, c.id, c.url, c.token, \
             c.auth_scheme, c.auth_credentials, c.version FROM push_outbox o \
             JOIN push_configs c ON c.task_id = o.task_id AND c.id = o.config_id \
             WHERE o.next_at <= ?1 AND NOT EXISTS (SELECT 1 FROM push_outbox p \
               WHERE p.task_id = o.task_id AND p.config_id = o.config_id \
               AND p.event_seq < o.event_seq) \
             ORDER BY o.next_at, o.id LIMIT ?2",
        )
        .bind(now_ms)
        .bind(limit)
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(PushDelivery {
                    outbox_id: r.try_get("outbox_id")?,
                    event_seq: r.try_get::<i64, _>("event_seq")?.max(0) as u64,
                    attempts: r
                        .try_get::<i64, _>("attempts")?
                        .clamp(0, i64::from(u32::MAX)) as u32,
                    config: config_from_row(r)?,
                })
            })
            .collect()
    }

    /// Told after each commit that queued deliveries (an event of a task
    /// with configs, or a config's backfill).
    pub fn push_wake(&self) -> std::sync::Arc<tokio::sync::Notify> {
        self.tasks.push_wake()
    }

    /// When the next delivery is due (unix ms), if any is queued.
    pub async fn next_push_at(&self) -> Result<Option<i64>, StoreError> {
        // Each config's first delivery only: the rest wait behind it (a
        // retry's backoff holds back the events queued after it).
        let row = sqlx::query(
            "SELECT MIN(o.next_at) AS at FROM push_outbox o WHERE NOT EXISTS \
             (SELECT 1 FROM push_outbox p WHERE p.task_id = o.task_id \
              AND p.config_id = o.config_id AND p.event_seq < o.event_seq)",
        )
        .fetch_one(&self.reader)
        .await?;
        Ok(row.try_get("at")?)
    }

    /// A delivery done, or given up: it is not tried again.
    pub async fn push_done(&self, outbox_id: i64) -> Result<(), StoreError> {
        self.push_write(PushWrite::Done { outbox_id })
            .await
            .map(drop)
    }

    /// A delivery that failed, to try again at `next_at` (unix ms).
    pub async fn push_retry(
        &self,
        outbox_id: i64,
        next_at: i64,
        error: &str,
    ) -> Result<(), StoreError> {
        let write = PushWrite::Retry {
            outbox_id,
            next_at,
            error: error.to_string(),
        };
        self.push_write(write).await.map(drop)
    }
}
