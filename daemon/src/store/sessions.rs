//! Session rows: insert, the state transitions (running, restarting, ended,
//! interrupted at start-up) with their events, and reads.

use roost_wire::api::{ArtifactRecord, Session, SessionState, SessionUsage, StartRequest};
use sqlx::Row;

use super::rows::{SESSION_BY_ID, SESSION_COLUMNS, artifacts_json, session_from_row};
use super::session_writes::{Record, SessionRow, SessionWrite, UpgradeRow};
use super::writer::WriteOp;
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
        let row = SessionRow {
            id: new.id.to_string(),
            name: new.name.to_string(),
            capsule: new.capsule.to_string(),
            version: new.version.to_string(),
            manifest: new.manifest.to_string(),
            workdir: new.workdir.to_string(),
            bookkeeping_dir: new.bookkeeping_dir.to_string(),
            request_json: serde_json::to_string(new.request)
                .map_err(|e| StoreError::Corrupt(e.to_string()))?,
            restart_policy: new.request.restart.as_str(),
            artifacts_json: artifacts_json(new.artifacts)?,
            sandbox: new.sandbox.to_string(),
            at: at.clone(),
        };
        self.session_write(SessionWrite::Insert(Box::new(row)))
            .await?;
        // The record as written, without reading it back.
        Ok(Session {
            id: new.id.to_string(),
            name: new.name.to_string(),
            capsule: new.capsule.to_string(),
            version: new.version.to_string(),
            state: SessionState::Running,
            error: None,
            workdir: new.workdir.to_string(),
            bookkeeping_dir: new.bookkeeping_dir.to_string(),
            manifest: new.manifest.to_string(),
            restart_policy: new.request.restart,
            restart_count: 0,
            created_at: at.clone(),
            started_at: Some(at.clone()),
            ended_at: None,
            updated_at: at,
            artifacts: new.artifacts.to_vec(),
            sandbox: new.sandbox.to_string(),
            usage: SessionUsage::default(),
        })
    }

    /// Records the artifacts a session has now (after staging, a pull or a remove).
    pub async fn set_artifacts(
        &self,
        id: &str,
        artifacts: &[ArtifactRecord],
    ) -> Result<(), StoreError> {
        let json = artifacts_json(artifacts)?;
        self.session_write(SessionWrite::Artifacts {
            id: id.to_string(),
            json,
        })
        .await
        .map(drop)
    }

    /// The guest is about to execute.
    pub async fn mark_running(&self, id: &str) -> Result<(), StoreError> {
        self.session_write(SessionWrite::Running {
            id: id.to_string(),
            at: now(),
        })
        .await
        .map(drop)
    }

    /// Supervision is about to start the capsule again after `error`; returns the record.
    pub async fn mark_restarting(
        &self,
        id: &str,
        restart_count: u32,
        error: Option<&str>,
    ) -> Result<Session, StoreError> {
        self.session_write_read(
            id,
            SessionWrite::Restarting {
                id: id.to_string(),
                restart_count,
                error: error.map(str::to_string),
                at: now(),
            },
        )
        .await
    }

    /// The session runs another version of its capsule from now (`why`:
    /// `upgrade` or `rollback`); recorded `starting`, with both versions
    /// in its history.
    pub async fn record_upgrade(
        &self,
        id: &str,
        capsule: &str,
        version: &str,
        manifest: &str,
        request: &StartRequest,
        why: &'static str,
    ) -> Result<Session, StoreError> {
        let request_json =
            serde_json::to_string(request).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        self.session_write_read(
            id,
            SessionWrite::Upgraded(Box::new(UpgradeRow {
                id: id.to_string(),
                capsule: capsule.to_string(),
                version: version.to_string(),
                manifest: manifest.to_string(),
                request_json,
                why,
                at: now(),
            })),
        )
        .await
    }

    /// The versions a session has run, oldest first (empty until its first
    /// upgrade: then it has run only the one its row names), each with its
    /// start request.
    pub async fn session_versions(
        &self,
        id: &str,
    ) -> Result<Vec<(roost_wire::api::SessionVersion, StartRequest)>, StoreError> {
        let rows = sqlx::query(
            "SELECT capsule, version, manifest, request_json, since, why FROM session_versions \
             WHERE session_id = ?1 ORDER BY seq",
        )
        .bind(id)
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|r| {
                let request: StartRequest =
                    serde_json::from_str(&r.try_get::<String, _>("request_json")?)
                        .map_err(|e| StoreError::Corrupt(e.to_string()))?;
                Ok((
                    roost_wire::api::SessionVersion {
                        capsule: r.try_get("capsule")?,
                        version: r.try_get("version")?,
                        manifest: r.try_get("manifest")?,
                        since: r.try_get("since")?,
                        why: r.try_get("why")?,
                    },
                    request,
                ))
            })
            .collect()
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
        self.session_write_read(
            id,
            SessionWrite::Ended {
                id: id.to_string(),
                state: state.as_str(),
                error: error.map(str::to_string),
                stop_reason: stop_reason.map(StopReason::as_str),
                at: now(),
            },
        )
        .await
    }

    /// At start-up: every session the database says was live is marked
    /// `interrupted` (no ghosts). Returns how many were.
    pub async fn interrupt_live(&self) -> Result<u64, StoreError> {
        self.session_write(SessionWrite::InterruptLive {
            error: "roostd exited while the session was live",
            at: now(),
        })
        .await
    }

    /// One session write on the task writer; the rows it changed.
    pub(super) async fn session_write(&self, write: SessionWrite) -> Result<u64, StoreError> {
        let changed = self.write_one(WriteOp::Session(write, None)).await?;
        self.session_changes.send_modify(|n| *n = n.wrapping_add(1));
        Ok(changed)
    }

    /// One session write, and session `id`'s record as its transaction
    /// left it (read by the writer in that transaction: no read after it).
    async fn session_write_read(
        &self,
        id: &str,
        write: SessionWrite,
    ) -> Result<Session, StoreError> {
        let record = Record::of(id);
        self.write_one(WriteOp::Session(write, Some(record.clone())))
            .await?;
        self.session_changes.send_modify(|n| *n = n.wrapping_add(1));
        match record.take() {
            Some(read) => read,
            // No such row: the reader says so as it always has.
            None => self.record(id).await,
        }
    }

    /// A session's record by id, as committed.
    async fn record(&self, id: &str) -> Result<Session, StoreError> {
        let row = sqlx::query(&SESSION_BY_ID)
            .bind(id)
            .fetch_one(&self.reader)
            .await?;
        session_from_row(&row)
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
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(resumable_from_row).collect()
    }

    /// What it takes to run a session again (`roostctl restart`): its
    /// start request as stored, its name and restart count.
    pub async fn restartable(&self, id: &str) -> Result<Option<Resumable>, StoreError> {
        let row =
            sqlx::query("SELECT id, name, request_json, restart_count FROM sessions WHERE id = ?1")
                .bind(id)
                .fetch_optional(&self.reader)
                .await?;
        row.map(|row| resumable_from_row(&row)).transpose()
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
        let mut gone = 0;
        loop {
            let op = WriteOp::PruneSessionTasks {
                session_id: id.to_string(),
            };
            let deleted = self.write_one(op).await?;
            gone += deleted;
            if deleted < u64::from(super::writes::PRUNE_BATCH) {
                break;
            }
        }
        self.tasks_gone(gone);
        let op = WriteOp::DeleteSession { id: id.to_string() };
        Ok(self.write_one(op).await? == 1)
    }

    /// Whether the database takes writes now (a write that changes
    /// nothing goes through the writer and commits).
    pub async fn writable(&self) -> Result<(), StoreError> {
        self.write_one(WriteOp::Probe).await.map(drop)
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

fn resumable_from_row(row: &sqlx::sqlite::SqliteRow) -> Result<Resumable, StoreError> {
    let json: String = row.try_get("request_json")?;
    let request = serde_json::from_str(&json)
        .map_err(|e| StoreError::Corrupt(format!("request_json: {e}")))?;
    Ok(Resumable {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        request,
        restart_count: row.try_get::<u32, _>("restart_count")?,
    })
}
