//! Agent task rows: a task's start, its end with the tokens and turns it
//! used (added to its session's), and the session's task list.

use roost_wire::api::TaskRecord;
use sqlx::Row;

use super::rows::TASK_COLUMNS;
use super::session_writes::SessionWrite;
use super::writer::{TaskEndRow, WriteOp};
use super::{Store, StoreError, now};

/// A new task row (state `working`).
pub struct NewAgentTask<'a> {
    pub id: &'a str,
    pub session_id: &'a str,
    pub context_id: &'a str,
    pub source: &'a str,
    pub input_bytes: u64,
}

/// How a task ended, and what it used.
pub struct TaskEnd<'a> {
    pub id: &'a str,
    pub session_id: &'a str,
    /// `completed`, `failed` or `canceled`; `None` leaves the state to the
    /// task's event log (A2A tasks).
    pub state: Option<&'a str>,
    pub error: Option<&'a str>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub turns: u32,
}

impl Store {
    /// Records a task as `working`.
    pub async fn insert_task(&self, task: &NewAgentTask<'_>) -> Result<(), StoreError> {
        self.session_write(SessionWrite::AgentTask {
            id: task.id.to_string(),
            session_id: task.session_id.to_string(),
            context_id: task.context_id.to_string(),
            source: task.source.to_string(),
            input_bytes: i64::try_from(task.input_bytes).unwrap_or(i64::MAX),
            at: now(),
        })
        .await
        .map(drop)
    }

    /// Ends a task and adds what it used to its session's totals, atomically
    /// (on the task writer, after the task's own writes).
    pub async fn finish_task(&self, end: &TaskEnd<'_>) -> Result<(), StoreError> {
        let op = WriteOp::Finish(TaskEndRow {
            id: end.id.to_string(),
            session_id: end.session_id.to_string(),
            state: end.state.map(str::to_string),
            error: end.error.map(str::to_string),
            input_tokens: i64::try_from(end.input_tokens).unwrap_or(i64::MAX),
            output_tokens: i64::try_from(end.output_tokens).unwrap_or(i64::MAX),
            turns: end.turns,
            at: now(),
        });
        self.write_one(op).await.map(drop)
    }

    /// A session's tasks, oldest first.
    pub async fn tasks(&self, session_id: &str) -> Result<Vec<TaskRecord>, StoreError> {
        let sql = format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE session_id = ? ORDER BY created_at, id"
        );
        let rows = sqlx::query(&sql)
            .bind(session_id)
            .fetch_all(&self.reader)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(TaskRecord {
                    id: r.try_get("id")?,
                    context_id: r.try_get("context_id")?,
                    source: r.try_get("source")?,
                    state: r.try_get("state")?,
                    input_bytes: r.try_get::<i64, _>("input_bytes")?.max(0) as u64,
                    input_tokens: r.try_get::<i64, _>("input_tokens")?.max(0) as u64,
                    output_tokens: r.try_get::<i64, _>("output_tokens")?.max(0) as u64,
                    turns: r.try_get::<u32, _>("turns")?,
                    error: r.try_get("error")?,
                    created_at: r.try_get("created_at")?,
                    ended_at: r.try_get("ended_at")?,
                })
            })
            .collect()
    }
}
