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

pub(super) const TASK_COLUMNS: &str = "id, context_id, source, state, input_bytes, input_tokens, \
     output_tokens, turns, error, created_at, ended_at";

pub(super) fn session_from_row(row: &sqlx::sqlite::SqliteRow) -> Result<Session, StoreError> {
    let state: String = row.try_get("state")?;
    let policy: String = row.try_get("restart_policy")?;
    Ok(Session {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        capsule: row.try_get("capsule")?,
        version: row.try_get("version")?,
        state: SessionState::from_str(&state).map_err(StoreError::Corrupt)?,
        error: row.try_get("error")?,
        workdir: row.try_get("workdir")?,
        bookkeeping_dir: row.try_get("bookkeeping_dir")?,
        manifest: row.try_get("manifest")?,
        restart_policy: RestartPolicy::from_str(&policy).map_err(StoreError::Corrupt)?,
        restart_count: row.try_get::<u32, _>("restart_count")?,
        created_at: row.try_get("created_at")?,
        started_at: row.try_get("started_at")?,
        ended_at: row.try_get("ended_at")?,
        updated_at: row.try_get("updated_at")?,
        artifacts: serde_json::from_str(&row.try_get::<String, _>("artifacts_json")?)
            .map_err(|e| StoreError::Corrupt(format!("artifacts_json: {e}")))?,
        sandbox: row.try_get("sandbox")?,
        usage: SessionUsage {
            input_tokens: row.try_get::<i64, _>("input_tokens")?.max(0) as u64,
            output_tokens: row.try_get::<i64, _>("output_tokens")?.max(0) as u64,
            turns: row.try_get::<i64, _>("turns")?.max(0) as u64,
        },
    })
}

pub(super) fn artifacts_json(artifacts: &[ArtifactRecord]) -> Result<String, StoreError> {
    serde_json::to_string(artifacts).map_err(|e| StoreError::Corrupt(e.to_string()))
}
