//! Schedules in the store: read back by route or id, and written through
//! the task writer as `schedule_writes.rs` says.

use sqlx::Row;

use super::schedule_writes::ScheduleWrite;
use super::writer::WriteOp;
use super::{Store, StoreError};
use crate::schedules::model::{Missed, Origin, Overlap, Schedule, ScheduleTimes};

const COLUMNS: &str = "id, route, name, origin, text, context_id, cron, tz, every, at, missed, \
                       overlap, paused, created_ms, last_tick_ms, last_task_id, fired, skipped, \
                       last_error";

fn from_row(r: &sqlx::sqlite::SqliteRow) -> Result<Schedule, StoreError> {
    let rule = |column: &str| -> Result<String, StoreError> { Ok(r.try_get(column)?) };
    Ok(Schedule {
        id: r.try_get("id")?,
        route: r.try_get("route")?,
        name: r.try_get("name")?,
        origin: Origin::parse(&rule("origin")?),
        text: r.try_get("text")?,
        context_id: r.try_get("context_id")?,
        times: ScheduleTimes {
            cron: r.try_get("cron")?,
            tz: r.try_get("tz")?,
            every: r.try_get("every")?,
            at: r.try_get("at")?,
        },
        missed: rule("missed")?.parse::<Missed>().unwrap_or_default(),
        overlap: rule("overlap")?.parse::<Overlap>().unwrap_or_default(),
        paused: r.try_get("paused")?,
        created_ms: r.try_get("created_ms")?,
        last_tick_ms: r.try_get("last_tick_ms")?,
        last_task_id: r.try_get("last_task_id")?,
        fired: r.try_get::<i64, _>("fired")?.max(0) as u64,
        skipped: r.try_get::<i64, _>("skipped")?.max(0) as u64,
        last_error: r.try_get("last_error")?,
    })
}

impl Store {
    async fn schedule_write(&self, write: ScheduleWrite) -> Result<u64, StoreError> {
        self.write_one(WriteOp::Schedule(write)).await
    }

    /// `false`: the route already has a schedule of that name.
    pub async fn add_schedule(&self, schedule: &Schedule) -> Result<bool, StoreError> {
        Ok(self
            .schedule_write(ScheduleWrite::Add(Box::new(schedule.clone())))
            .await?
            > 0)
    }

    /// `false`: there was none by that id.
    pub async fn remove_schedule(&self, id: &str) -> Result<bool, StoreError> {
        let id = id.to_string();
        Ok(self.schedule_write(ScheduleWrite::Remove { id }).await? > 0)
    }

    /// `false`: there was none by that id.
    pub async fn pause_schedule(
        &self,
        id: &str,
        paused: bool,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let write = ScheduleWrite::Pause {
            id: id.to_string(),
            paused,
            now_ms,
        };
        Ok(self.schedule_write(write).await? > 0)
    }

    /// A tick passed over, and why.
    pub async fn pass_tick(&self, id: &str, tick_ms: i64, error: &str) -> Result<(), StoreError> {
        let write = ScheduleWrite::Passed {
            id: id.to_string(),
            tick_ms,
            error: error.to_string(),
        };
        self.schedule_write(write).await.map(drop)
    }

    /// Replaces a route's schedules from its capsule's manifest.
    pub async fn set_manifest_schedules(
        &self,
        route: &str,
        schedules: Vec<Schedule>,
    ) -> Result<(), StoreError> {
        let write = ScheduleWrite::Manifest {
            route: route.to_string(),
            schedules,
        };
        self.schedule_write(write).await.map(drop)
    }

    /// Whether a route has schedules from a manifest.
    pub async fn has_manifest_schedules(&self, route: &str) -> Result<bool, StoreError> {
        Ok(
            sqlx::query("SELECT 1 FROM schedules WHERE route = ?1 AND origin = 'manifest' LIMIT 1")
                .bind(route)
                .fetch_optional(&self.reader)
                .await?
                .is_some(),
        )
    }

    /// Schedules, of one route or all, by route and name.
    pub async fn schedules(&self, route: Option<&str>) -> Result<Vec<Schedule>, StoreError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM schedules WHERE ?1 IS NULL OR route = ?1 ORDER BY route, name"
        );
        let rows = sqlx::query(&sql)
            .bind(route)
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(from_row).collect()
    }

    pub async fn schedule(&self, id: &str) -> Result<Option<Schedule>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM schedules WHERE id = ?1");
        let row = sqlx::query(&sql)
            .bind(id)
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(from_row).transpose()
    }
}
