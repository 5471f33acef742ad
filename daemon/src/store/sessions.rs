//! Session rows: insert, the state transitions (running, restarting, ended,
//! interrupted at start-up) with their events, and reads.

use roost_ctl::api::{ArtifactRecord, Session, SessionState, StartRequest};
use sqlx::Row;

use super::rows::{SESSION_COLUMNS, artifacts_json, session_from_row};
use super::{Store, StoreError, now};

/// Why a session ended in `stopped`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    Operator,
    Shutdown,
}

impl StopReason {
    fn as_str(self) -> &'static str {
        match self {
            Self::Operator => "operator",
            Self::Shutdown => "shutdown",
        }
    }
}

/// An ended session that roostd will not bring back.
const ENDED: &str = "state IN ('completed', 'failed', 'stopped', 'interrupted') \
     AND ended_at IS NOT NULL \
     AND NOT (state = 'interrupted' AND restart_policy IN ('always', 'on-failure')) \
     AND NOT (state = 'stopped' AND stop_reason = 'shutdown' AND restart_policy = 'always')";

/// A new session row.
pub struct NewSession<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub capsule: &'a str,
    pub version: &'a str,
    pub manifest: &'a str,
    pub workdir: &'a str,
    pub bookkeeping_dir: &'a str,
    pub request: &'a StartRequest,
    pub artifacts: &'a [ArtifactRecord],
    pub sandbox: &'a str,
}

/// A session the daemon should bring back at start-up.
pub struct Resumable {
    pub id: String,
    pub name: String,
    pub request: StartRequest,
    pub restart_count: u32,
}

impl Store {
    /// Inserts a new session and returns its record. Staging is complete before
    /// a row exists, so a fresh session is recorded directly as `running`;
    /// `starting` is the state of a session waiting to be started again.
    pub async fn insert_session(&self, new: &NewSession<'_>) -> Result<Session, StoreError> {
        let at = now();
        let request =
            serde_json::to_string(new.request).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let sql = format!(
            "INSERT INTO sessions (id, name, capsule, version, state, manifest, workdir, \
             bookkeeping_dir, request_json, restart_policy, created_at, started_at, updated_at, \
             artifacts_json, sandbox) \
             VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?10, ?11, ?12) \
             RETURNING {SESSION_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(new.id)
            .bind(new.name)
            .bind(new.capsule)
            .bind(new.version)
            .bind(new.manifest)
            .bind(new.workdir)
            .bind(new.bookkeeping_dir)
            .bind(request)
            .bind(new.request.restart.as_str())
            .bind(&at)
            .bind(artifacts_json(new.artifacts)?)
            .bind(new.sandbox)
            .fetch_one(&self.writer)
            .await?;
        session_from_row(&row)
    }

    /// Records the artifacts a session has now (after staging, a pull or a remove).
    pub async fn set_artifacts(
        &self,
        id: &str,
        artifacts: &[ArtifactRecord],
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE sessions SET artifacts_json = ?1 WHERE id = ?2")
            .bind(artifacts_json(artifacts)?)
            .bind(id)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// The guest is about to execute.
    pub async fn mark_running(&self, id: &str) -> Result<(), StoreError> {
        let at = now();
        sqlx::query(
            "UPDATE sessions SET state = 'running', started_at = ?1, ended_at = NULL, \
             stop_reason = NULL, updated_at = ?1 WHERE id = ?2",
        )
        .bind(&at)
        .bind(id)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// Supervision is about to start the capsule again after `error`; returns the record.
    pub async fn mark_restarting(
        &self,
        id: &str,
        restart_count: u32,
        error: Option<&str>,
    ) -> Result<Session, StoreError> {
        let sql = format!(
            "UPDATE sessions SET state = 'starting', restart_count = ?, error = ?, \
             ended_at = NULL, stop_reason = NULL, updated_at = ? WHERE id = ? \
             RETURNING {SESSION_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(restart_count)
            .bind(error)
            .bind(now())
            .bind(id)
            .fetch_one(&self.writer)
            .await?;
        session_from_row(&row)
    }

    /// The session ended (for now): completed, failed, stopped or interrupted.
    /// Returns the final record.
    pub async fn mark_ended(
        &self,
        id: &str,
        state: SessionState,
        error: Option<&str>,
        stop_reason: Option<StopReason>,
    ) -> Result<Session, StoreError> {
        let sql = format!(
            "UPDATE sessions SET state = ?1, error = ?2, stop_reason = ?3, ended_at = ?5, \
             updated_at = ?5 WHERE id = ?4 RETURNING {SESSION_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(state.as_str())
            .bind(error)
            .bind(stop_reason.map(StopReason::as_str))
            .bind(id)
            .bind(now())
            .fetch_one(&self.writer)
            .await?;
        session_from_row(&row)
    }

    /// At start-up: every session the database says was live is marked
    /// `interrupted` (no ghosts). Returns how many were.
    pub async fn interrupt_live(&self) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "UPDATE sessions SET state = 'interrupted', error = ?1, ended_at = ?2, updated_at = ?2 \
             WHERE state IN ('starting', 'running')",
        )
        .bind("roostd exited while the session was live")
        .bind(now())
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected())
    }

    /// Sessions to bring back at start-up: `always` ones that were interrupted or
    /// stopped by a shutdown, and `on-failure` ones that were interrupted.
    pub async fn resumable(&self) -> Result<Vec<Resumable>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, name, request_json, restart_count FROM sessions \
             WHERE (state = 'interrupted' AND restart_policy IN ('always', 'on-failure')) \
                OR (state = 'stopped' AND stop_reason = 'shutdown' AND restart_policy = 'always') \
             ORDER BY created_at",
        )
        .fetch_all(&self.writer)
        .await?;
        rows.into_iter()
            .map(|row| {
                let json: String = row.try_get("request_json")?;
                let request = serde_json::from_str(&json)
                    .map_err(|e| StoreError::Corrupt(format!("request_json: {e}")))?;
                Ok(Resumable {
                    id: row.try_get("id")?,
                    name: row.try_get("name")?,
                    request,
                    restart_count: row.try_get::<u32, _>("restart_count")?,
                })
            })
            .collect()
    }

    /// Ended sessions that may be deleted, oldest first (at most `limit`):
    /// ended before `ended_before` or beyond the newest `keep` ended ones;
    /// never one roostd will bring back, nor one with an A2A task that is
    /// not ended before `tasks_ended_before` (`None`: with any A2A task).
    pub async fn prunable_sessions(
        &self,
        ended_before: Option<&str>,
        keep: Option<u64>,
        tasks_ended_before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Session>, StoreError> {
        let sql = format!(
            "SELECT {SESSION_COLUMNS} FROM sessions WHERE {ENDED} \
             AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.session_id = sessions.id \
               AND t.source = 'a2a' AND NOT (?3 IS NOT NULL AND t.ended_at IS NOT NULL \
               AND t.ended_at < ?3)) \
             AND ((?1 IS NOT NULL AND ended_at < ?1) OR (?2 IS NOT NULL AND id IN \
               (SELECT id FROM sessions WHERE {ENDED} ORDER BY ended_at DESC, id DESC \
                LIMIT -1 OFFSET ?2))) \
             ORDER BY ended_at, id LIMIT ?4"
        );
        let rows = sqlx::query(&sql)
            .bind(ended_before)
            .bind(keep.map(|k| i64::try_from(k).unwrap_or(i64::MAX)))
            .bind(tasks_ended_before)
            .bind(limit)
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(session_from_row).collect()
    }

    /// Deletes a session that is not live, with its events and tasks (in
    /// batches on the task writer). `false` when it is live (or gone).
    pub async fn delete_session(&self, id: &str) -> Result<bool, StoreError> {
        use super::writer::WriteOp;
        let answer = |mut answers: Vec<super::writer::Written>| match answers.pop() {
            Some(Ok(Some(n))) => Ok(n),
            Some(Err(e)) => Err(StoreError::Write(e)),
            _ => Ok(0),
        };
        loop {
            let op = WriteOp::PruneSessionTasks {
                session_id: id.to_string(),
            };
            if answer(self.tasks.write(vec![op]).await?)? < u64::from(super::writes::PRUNE_BATCH) {
                break;
            }
        }
        let op = WriteOp::DeleteSession { id: id.to_string() };
        Ok(answer(self.tasks.write(vec![op]).await?)? == 1)
    }

    /// By id, else by name (the live session with that name, else the newest one).
    pub async fn get(&self, id_or_name: &str) -> Result<Option<Session>, StoreError> {
        let sql = format!(
            "SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1 OR name = ?1 \
             ORDER BY (id = ?1) DESC, (state IN ('starting', 'running')) DESC, created_at DESC \
             LIMIT 1"
        );
        let row = sqlx::query(&sql)
            .bind(id_or_name)
            .fetch_optional(&self.reader)
            .await?;
        row.map(|r| session_from_row(&r)).transpose()
    }

    pub async fn list(&self, all: bool) -> Result<Vec<Session>, StoreError> {
        let filter = if all {
            ""
        } else {
            "WHERE state IN ('starting', 'running')"
        };
        let sql =
            format!("SELECT {SESSION_COLUMNS} FROM sessions {filter} ORDER BY created_at, id");
        let rows = sqlx::query(&sql).fetch_all(&self.reader).await?;
        rows.iter().map(session_from_row).collect()
    }

    /// The session's state transitions, oldest first: (state, detail, at).
    pub async fn events(
        &self,
        id: &str,
    ) -> Result<Vec<(String, Option<String>, String)>, StoreError> {
        let rows = sqlx::query(
            "SELECT state, detail, at FROM session_events WHERE session_id = ? ORDER BY seq",
        )
        .bind(id)
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("state")?, r.try_get("detail")?, r.try_get("at")?)))
            .collect()
    }
}
