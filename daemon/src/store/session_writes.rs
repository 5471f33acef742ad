//! The writes of session rows as the task writer applies them: a new
//! session, its artifacts, its state transitions (migration 0001's triggers
//! add each one's event in the same statement), the sweep at start-up, and
//! an agent task's first row. None needs its commit synced on its own: a
//! session's record is the operator's, not an acknowledged task (see
//! [`WriteOp::durable`](super::writes::WriteOp::durable)).

use std::sync::{Arc, Mutex, PoisonError};

use roost_wire::api::Session;
use rusqlite::{Connection, OptionalExtension, params};

use super::StoreError;
use super::rows::{SESSION_BY_ID, session_from_row};

/// A new session row, recorded `running` (staging is done before it exists).
pub(super) struct SessionRow {
    pub id: String,
    pub name: String,
    pub capsule: String,
    pub version: String,
    pub manifest: String,
    pub workdir: String,
    pub bookkeeping_dir: String,
    pub request_json: String,
    pub restart_policy: &'static str,
    pub artifacts_json: String,
    pub sandbox: String,
    pub at: String,
}

/// One change to the sessions table (or an agent task's first row).
pub(super) enum SessionWrite {
    Insert(Box<SessionRow>),
    Artifacts {
        id: String,
        json: String,
    },
    Running {
        id: String,
        at: String,
    },
    Restarting {
        id: String,
        restart_count: u32,
        error: Option<String>,
        at: String,
    },
    /// Runs another version of its capsule from now (an upgrade in place or
    /// its rollback): the row says so, and the versions table keeps both.
    Upgraded(Box<UpgradeRow>),
    Ended {
        id: String,
        state: &'static str,
        error: Option<String>,
        stop_reason: Option<&'static str>,
        at: String,
    },
    /// Idle for its `lifecycle.hibernate_after`: `hibernated`, with what a
    /// restart needs to keep its inbox open.
    Hibernated {
        id: String,
        depth: u32,
        same_context: &'static str,
        at: String,
    },
    /// Woken by a task: `running` again.
    Woken {
        id: String,
        at: String,
    },
    /// Every session still `starting` or `running` becomes `interrupted`.
    InterruptLive {
        error: &'static str,
        at: String,
    },
    /// An agent's task, `working`.
    AgentTask {
        id: String,
        session_id: String,
        context_id: String,
        source: String,
        input_bytes: i64,
        at: String,
    },
}

/// A session's next version as written.
pub(super) struct UpgradeRow {
    pub id: String,
    pub capsule: String,
    pub version: String,
    pub manifest: String,
    pub request_json: String,
    pub why: &'static str,
    pub at: String,
}

/// Where the writer leaves a session's record as the transaction that
/// changed it left it: a transition's caller gets the row it wrote without
/// a read afterwards (a round trip to a reader's thread).
#[derive(Clone)]
pub(super) struct Record {
    id: String,
    row: Arc<Mutex<Option<Result<Session, String>>>>,
}

impl Record {
    pub(super) fn of(id: &str) -> Self {
        Self {
            id: id.to_string(),
            row: Arc::default(),
        }
    }

    /// Reads the row inside the write's transaction (again, when a group
    /// that failed is tried one job at a time).
    pub(super) fn fill(&self, conn: &Connection) -> rusqlite::Result<()> {
        let read = conn
            .prepare_cached(&SESSION_BY_ID)?
            .query_row(params![self.id], |row| {
                Ok(session_from_row(row).map_err(|e| e.to_string()))
            })
            .optional()?;
        *self.row.lock().unwrap_or_else(PoisonError::into_inner) = read;
        Ok(())
    }

    /// The record as committed; `None` when there is no such row.
    pub(super) fn take(&self) -> Option<Result<Session, StoreError>> {
        let read = self
            .row
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()?;
        Some(read.map_err(StoreError::Corrupt))
    }
}

/// Applies one; answers the rows it changed.
pub(super) fn apply(conn: &Connection, write: &SessionWrite) -> rusqlite::Result<u64> {
    let changed = match write {
        SessionWrite::Insert(row) => conn
            .prepare_cached(
                "INSERT INTO sessions (id, name, capsule, version, state, manifest, workdir, \
                 bookkeeping_dir, request_json, restart_policy, created_at, started_at, \
                 updated_at, artifacts_json, sandbox) \
                 VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?10, ?11, ?12)",
            )?
            .execute(params![
                row.id,
                row.name,
                row.capsule,
                row.version,
                row.manifest,
                row.workdir,
                row.bookkeeping_dir,
                row.request_json,
                row.restart_policy,
                row.at,
                row.artifacts_json,
                row.sandbox
            ])?,
        SessionWrite::Artifacts { id, json } => conn
            .prepare_cached("UPDATE sessions SET artifacts_json = ?1 WHERE id = ?2")?
            .execute(params![json, id])?,
        SessionWrite::Running { id, at } => conn
            .prepare_cached(
                "UPDATE sessions SET state = 'running', started_at = ?1, ended_at = NULL, \
                 stop_reason = NULL, updated_at = ?1 WHERE id = ?2",
            )?
            .execute(params![at, id])?,
        SessionWrite::Restarting {
            id,
            restart_count,
            error,
            at,
        } => {
            unhibernate(conn, id)?;
            conn.prepare_cached(
                "UPDATE sessions SET state = 'starting', restart_count = ?1, error = ?2, \
                 ended_at = NULL, stop_reason = NULL, updated_at = ?3 WHERE id = ?4",
            )?
            .execute(params![restart_count, error, at, id])?
        }
        SessionWrite::Upgraded(row) => upgraded(conn, row)?,
        SessionWrite::Ended {
            id,
            state,
            error,
            stop_reason,
            at,
        } => {
            unhibernate(conn, id)?;
            conn.prepare_cached(
                "UPDATE sessions SET state = ?1, error = ?2, stop_reason = ?3, ended_at = ?5, \
                 updated_at = ?5 WHERE id = ?4",
            )?
            .execute(params![state, error, stop_reason, id, at])?
        }
        SessionWrite::Hibernated {
            id,
            depth,
            same_context,
            at,
        } => hibernated(conn, id, *depth, same_context, at)?,
        SessionWrite::Woken { id, at } => woken(conn, id, at)?,
        SessionWrite::InterruptLive { error, at } => conn
            .prepare_cached(
                "UPDATE sessions SET state = 'interrupted', error = ?1, ended_at = ?2, \
                 updated_at = ?2 WHERE state IN ('starting', 'running') \
                 AND id NOT IN (SELECT session_id FROM hibernations)",
            )?
            .execute(params![error, at])?,
        SessionWrite::AgentTask {
            id,
            session_id,
            context_id,
            source,
            input_bytes,
            at,
        } => conn
            .prepare_cached(
                "INSERT INTO tasks (id, session_id, context_id, source, state, input_bytes, \
                 created_at, updated_at) VALUES (?1, ?2, ?3, ?4, 'working', ?5, ?6, ?6)",
            )?
            .execute(params![id, session_id, context_id, source, input_bytes, at])?,
    };
    Ok(changed as u64)
}

/// The row `hibernated` (only from `running`: a stop that came first
/// wins) and its inbox's shape kept beside it.
fn hibernated(
    conn: &Connection,
    id: &str,
    depth: u32,
    same_context: &str,
    at: &str,
) -> rusqlite::Result<usize> {
    let changed = conn
        .prepare_cached(
            "UPDATE sessions SET error = NULL, updated_at = ?1 WHERE id = ?2 AND state = 'running'",
        )?
        .execute(params![at, id])?;
    if changed > 0 {
        conn.prepare_cached(
            "INSERT OR REPLACE INTO hibernations (session_id, depth, same_context, since) \
             VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(params![id, depth, same_context, at])?;
        event(conn, id, "hibernated", at)?;
    }
    Ok(changed)
}

/// Its hibernation row goes (the row reads `running` again), with the event.
fn woken(conn: &Connection, id: &str, at: &str) -> rusqlite::Result<usize> {
    let changed = unhibernate(conn, id)?;
    if changed > 0 {
        conn.prepare_cached("UPDATE sessions SET updated_at = ?1 WHERE id = ?2")?
            .execute(params![at, id])?;
        event(conn, id, "running", at)?;
    }
    Ok(changed)
}

/// A session that runs again, or ends, is not hibernated.
fn unhibernate(conn: &Connection, id: &str) -> rusqlite::Result<usize> {
    conn.prepare_cached("DELETE FROM hibernations WHERE session_id = ?1")?
        .execute(params![id])
}

/// A transition the state column does not show (the triggers add the others).
fn event(conn: &Connection, id: &str, state: &str, at: &str) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "INSERT INTO session_events (session_id, state, detail, at) VALUES (?1, ?2, NULL, ?3)",
    )?
    .execute(params![id, state, at])
}

/// The version it ran first (once), the new one, and the row pointed at it.
fn upgraded(conn: &Connection, row: &UpgradeRow) -> rusqlite::Result<usize> {
    unhibernate(conn, &row.id)?;
    conn.prepare_cached(
        "INSERT INTO session_versions (session_id, seq, capsule, version, manifest, request_json, \
         since, why) SELECT id, 1, capsule, version, manifest, request_json, created_at, 'start' \
         FROM sessions WHERE id = ?1 AND NOT EXISTS \
         (SELECT 1 FROM session_versions WHERE session_id = ?1)",
    )?
    .execute(params![row.id])?;
    conn.prepare_cached(
        "INSERT INTO session_versions (session_id, seq, capsule, version, manifest, request_json, \
         since, why) SELECT ?1, MAX(seq) + 1, ?2, ?3, ?4, ?5, ?6, ?7 FROM session_versions \
         WHERE session_id = ?1",
    )?
    .execute(params![
        row.id,
        row.capsule,
        row.version,
        row.manifest,
        row.request_json,
        row.at,
        row.why
    ])?;
    conn.prepare_cached(
        "UPDATE sessions SET capsule = ?2, version = ?3, manifest = ?4, request_json = ?5, \
         state = 'starting', error = NULL, ended_at = NULL, stop_reason = NULL, updated_at = ?6 \
         WHERE id = ?1",
    )?
    .execute(params![
        row.id,
        row.capsule,
        row.version,
        row.manifest,
        row.request_json,
        row.at
    ])
}
