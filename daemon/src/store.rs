//! The SQLite store: the only module that knows SQL. Sessions, their start
//! requests and every state transition, agent tasks and token use, in a WAL
//! database with embedded migrations.

use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use roost_ctl::api::{
    ArtifactRecord, RestartPolicy, Session, SessionState, SessionUsage, StartRequest, TaskRecord,
};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};

use crate::tasks::model::TaskState;

mod a2a_tasks;
mod writer;
use writer::{TaskEndRow, TaskWriter, WriteOp};

/// A database problem; the message names what failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Sql(#[from] sqlx::Error),
    #[error("database write failed: {0}")]
    Write(#[from] writer::WriteError),
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("database holds an unreadable row: {0}")]
    Corrupt(String),
    #[error("cannot make the database file private: {0}")]
    Files(#[source] std::io::Error),
}

impl StoreError {
    /// The task writer's thread is gone (roostd is shutting down).
    pub fn writer_stopped() -> Self {
        Self::Write(writer::WriteError::Stopped)
    }
}

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

/// A new A2A task (state `submitted`) and the message that created it.
pub struct NewA2aTask<'a> {
    pub id: &'a str,
    pub session_id: &'a str,
    pub route: &'a str,
    pub context_id: &'a str,
    pub message_id: &'a str,
    pub text: &'a str,
    pub message_json: &'a str,
}

/// Which tasks `a2a_tasks` returns.
#[derive(Debug, Default)]
pub struct TaskFilter<'a> {
    pub session_id: Option<&'a str>,
    pub context_id: Option<&'a str>,
    pub state: Option<TaskState>,
    pub limit: u32,
    pub offset: u32,
}

/// A queued A2A task record (see [`Store::queue_a2a_task`]).
pub struct TaskInsert(tokio::sync::oneshot::Receiver<Vec<writer::Written>>);

impl TaskInsert {
    /// Waits until the record is committed (the task survives a crash).
    pub async fn committed(self) -> Result<(), StoreError> {
        let written = self.0.await.map_err(|_| StoreError::writer_stopped())?;
        match written.into_iter().next() {
            Some(Ok(Some(_))) => Ok(()),
            Some(Err(e)) => Err(StoreError::Write(e)),
            _ => Err(StoreError::Corrupt("a new task was not written".into())),
        }
    }
}

/// A session the daemon should bring back at start-up.
pub struct Resumable {
    pub id: String,
    pub name: String,
    pub request: StartRequest,
    pub restart_count: u32,
}

/// Handle on the database: one writer connection for sessions (SQLite
/// serialises writes anyway, and a single writer avoids busy-wait sleeps), the
/// task writer's thread for A2A tasks and their events (see [`writer`]), and
/// a small pool of readers.
#[derive(Clone)]
pub struct Store {
    writer: SqlitePool,
    reader: SqlitePool,
    /// A2A tasks and their events, committed in groups; checkpoints.
    tasks: TaskWriter,
}

const SESSION_COLUMNS: &str = "id, name, capsule, version, state, error, manifest, workdir, \
     bookkeeping_dir, restart_policy, restart_count, created_at, started_at, ended_at, updated_at, \
     artifacts_json, sandbox, input_tokens, output_tokens, turns";

const TASK_COLUMNS: &str = "id, context_id, source, state, input_bytes, input_tokens, \
     output_tokens, turns, error, created_at, ended_at";

/// The database and its WAL and shared-memory files are roostd's alone
/// (0600), whatever the umask: tools of a root roostd may search the state
/// dir on their way to their workdir. SQLite gives the `-wal` and `-shm`
/// files the database's mode, so a new database starts as an empty 0600 file.
fn private_files(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        match std::fs::set_permissions(&name, std::fs::Permissions::from_mode(0o600)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

pub fn now() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

impl Store {
    /// Opens (creating if needed) the database at `path` and applies migrations.
    pub async fn open(path: &Path) -> Result<Self, StoreError> {
        private_files(path).map_err(StoreError::Files)?;
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(5));
        // Checkpoints run on the task writer's thread (see `checkpoint`),
        // not inside whichever commit happens to cross a threshold.
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            .connect_with(options.clone().pragma("wal_autocheckpoint", "0"))
            .await?;
        sqlx::migrate!("../migrations").run(&writer).await?;
        // Readers map the database file instead of reading it page by page.
        // A local SQLite connection cannot go stale: no ping before each use.
        let reader = SqlitePoolOptions::new()
            .max_connections(4)
            .test_before_acquire(false)
            .connect_with(options.read_only(true).pragma("mmap_size", "268435456"))
            .await?;
        Ok(Self {
            tasks: TaskWriter::open(path)?,
            writer,
            reader,
        })
    }

    /// A store over an existing (migrated) pool on a database file (tests
    /// with `#[sqlx::test]`).
    pub fn from_pool(pool: SqlitePool) -> Result<Self, StoreError> {
        let path = pool.connect_options().get_filename().to_path_buf();
        Ok(Self {
            tasks: TaskWriter::open(&path)?,
            writer: pool.clone(),
            reader: pool,
        })
    }

    /// Copies the WAL back into the database without blocking writers
    /// (PASSIVE), on the task writer's thread between its groups, so a
    /// checkpoint under steady load still reaches the end of the WAL and the
    /// next write starts it over. The daemon calls it periodically and at
    /// shutdown.
    pub async fn checkpoint(&self) -> Result<(), StoreError> {
        Ok(self.tasks.checkpoint().await?)
    }

    pub async fn close(&self) {
        let _ = self.checkpoint().await;
        self.writer.close().await;
        self.reader.close().await;
    }

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

    /// Records a task as `working`.
    pub async fn insert_task(&self, task: &NewAgentTask<'_>) -> Result<(), StoreError> {
        let at = now();
        sqlx::query(
            "INSERT INTO tasks (id, session_id, context_id, source, state, input_bytes, \
             created_at, updated_at) VALUES (?1, ?2, ?3, ?4, 'working', ?5, ?6, ?6)",
        )
        .bind(task.id)
        .bind(task.session_id)
        .bind(task.context_id)
        .bind(task.source)
        .bind(i64::try_from(task.input_bytes).unwrap_or(i64::MAX))
        .bind(&at)
        .execute(&self.writer)
        .await?;
        Ok(())
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
        let written = self
            .tasks
            .write(vec![op])
            .await
            .map_err(StoreError::Write)?;
        match written.into_iter().next() {
            Some(Err(e)) => Err(StoreError::Write(e)),
            _ => Ok(()),
        }
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

fn session_from_row(row: &sqlx::sqlite::SqliteRow) -> Result<Session, StoreError> {
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

fn artifacts_json(artifacts: &[ArtifactRecord]) -> Result<String, StoreError> {
    serde_json::to_string(artifacts).map_err(|e| StoreError::Corrupt(e.to_string()))
}

#[cfg(test)]
mod tests;
