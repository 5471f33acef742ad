//! Reading rows back: the column lists and a session's record from its row.

use std::str::FromStr;

use roost_wire::api::{ArtifactRecord, RestartPolicy, Session, SessionState, SessionUsage};
use sqlx::Row;

use super::StoreError;

/// A hibernated session's row stays `running` (the table's states are
/// fixed by a CHECK): its row in `hibernations` makes it read `hibernated`.
pub(super) const SESSION_COLUMNS: &str = "id, name, capsule, version, \
     CASE WHEN state = 'running' AND EXISTS (SELECT 1 FROM hibernations h \
       WHERE h.session_id = sessions.id) THEN 'hibernated' ELSE state END AS state, \
     error, manifest, workdir, \
     bookkeeping_dir, restart_policy, restart_count, created_at, started_at, ended_at, updated_at, \
     artifacts_json, sandbox, input_tokens, output_tokens, turns";

/// One session's record by id: the readers' statement and the one the
/// task writer reads a changed row back with, alike.
pub(super) static SESSION_BY_ID: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1"));

pub(super) const TASK_COLUMNS: &str = "id, context_id, source, state, input_bytes, input_tokens, \
     output_tokens, turns, error, created_at, ended_at";

/// A row's cells by column name, as each database layer reads them: the
/// readers' (sqlx) and the task writer's own connection (rusqlite), so a
/// record is made from either by one mapping.
pub(super) trait Cells {
    fn text(&self, column: &str) -> Result<String, StoreError>;
    fn maybe_text(&self, column: &str) -> Result<Option<String>, StoreError>;
    fn int(&self, column: &str) -> Result<i64, StoreError>;
}

impl Cells for sqlx::sqlite::SqliteRow {
    fn text(&self, column: &str) -> Result<String, StoreError> {
        Ok(self.try_get(column)?)
    }
    fn maybe_text(&self, column: &str) -> Result<Option<String>, StoreError> {
        Ok(self.try_get(column)?)
    }
    fn int(&self, column: &str) -> Result<i64, StoreError> {
        Ok(self.try_get(column)?)
    }
}

impl Cells for rusqlite::Row<'_> {
    fn text(&self, column: &str) -> Result<String, StoreError> {
        self.get(column).map_err(cell(column))
    }
    fn maybe_text(&self, column: &str) -> Result<Option<String>, StoreError> {
        self.get(column).map_err(cell(column))
    }
    fn int(&self, column: &str) -> Result<i64, StoreError> {
        self.get(column).map_err(cell(column))
    }
}

fn cell(column: &str) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
    move |e| StoreError::Corrupt(format!("{column}: {e}"))
}

pub(super) fn session_from_row(row: &impl Cells) -> Result<Session, StoreError> {
    let state = row.text("state")?;
    let policy = row.text("restart_policy")?;
    let count = |column: &str| row.int(column).map(|n| n.max(0) as u64);
    Ok(Session {
        id: row.text("id")?,
        name: row.text("name")?,
        capsule: row.text("capsule")?,
        version: row.text("version")?,
        state: SessionState::from_str(&state).map_err(StoreError::Corrupt)?,
        error: row.maybe_text("error")?,
        workdir: row.text("workdir")?,
        bookkeeping_dir: row.text("bookkeeping_dir")?,
        manifest: row.text("manifest")?,
        restart_policy: RestartPolicy::from_str(&policy).map_err(StoreError::Corrupt)?,
        restart_count: u32::try_from(row.int("restart_count")?)
            .map_err(|e| StoreError::Corrupt(format!("restart_count: {e}")))?,
        created_at: row.text("created_at")?,
        started_at: row.maybe_text("started_at")?,
        ended_at: row.maybe_text("ended_at")?,
        updated_at: row.text("updated_at")?,
        artifacts: serde_json::from_str(&row.text("artifacts_json")?)
            .map_err(|e| StoreError::Corrupt(format!("artifacts_json: {e}")))?,
        sandbox: row.text("sandbox")?,
        usage: SessionUsage {
            input_tokens: count("input_tokens")?,
            output_tokens: count("output_tokens")?,
            turns: count("turns")?,
        },
    })
}

pub(super) fn artifacts_json(artifacts: &[ArtifactRecord]) -> Result<String, StoreError> {
    serde_json::to_string(artifacts).map_err(|e| StoreError::Corrupt(e.to_string()))
}
