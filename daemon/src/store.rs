//! The SQLite store: the only module that knows SQL. Sessions, their start
//! requests and every state transition (`sessions.rs`, written as
//! `session_writes.rs` says), agent tasks and token use (`agent_tasks.rs`),
//! A2A tasks and their event logs (`a2a_tasks.rs`, `writes.rs`), push
//! notification configs and their outbox (`push.rs`, written as
//! `push_writes.rs` says), agents' conversations per context
//! (`conversations.rs`, written as `conversation_writes.rs` says),
//! schedules and their ticks (`schedules.rs`, written as
//! `schedule_writes.rs` says), de-duplication entries of deleted tasks
//! (`message_ids.rs`), all written
//! by the one writer thread (`writer.rs`), in a WAL database with embedded
//! migrations; rows are read back in `rows.rs`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

mod a2a_tasks;
mod agent_tasks;
mod checkpointer;
mod conversation_writes;
mod conversations;
mod hibernations;
mod message_ids;
mod push;
mod push_writes;
mod rows;
mod schedule_writes;
mod schedules;
mod session_events;
mod session_writes;
mod sessions;
mod wal;
mod writer;
mod writes;

pub use agent_tasks::{NewAgentTask, TaskEnd};
use checkpointer::Checkpointer;
pub use conversations::Conversation;
pub use hibernations::Asleep;
pub use message_ids::Swept;
pub use push::now_ms;
pub use sessions::{NewSession, Resumable, StopReason};
use writer::{TaskWriter, WriteOp};
pub use writer::{WRITE_DEADLINE, WriteError};

/// How durable an A2A task write is once acknowledged (`store.sync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// Each commit is synced to disk before it is acknowledged: an
    /// acknowledged task survives a power loss or a VM reset.
    #[default]
    Full,
    /// Synced at checkpoints: survives roostd being killed, but a power loss
    /// can take the last ~second of acknowledged tasks.
    Normal,
}

impl Durability {
    fn pragma(self) -> &'static str {
        match self {
            Self::Full => "FULL",
            Self::Normal => "NORMAL",
        }
    }
}

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
    /// Waits for an answer the task writer sends, at most
    /// [`WRITE_DEADLINE`]: a writer that is gone or hangs is an error, never
    /// a wait without end.
    pub async fn from_writer<T>(
        answer: tokio::sync::oneshot::Receiver<T>,
    ) -> Result<T, StoreError> {
        Ok(writer::deadline(answer).await?)
    }
}

/// A queued A2A task record (see [`Store::queue_a2a_task`]).
pub struct TaskInsert {
    answer: tokio::sync::oneshot::Receiver<Vec<writer::Written>>,
    ticket: u64,
    writer: TaskWriter,
}

/// What became of a task record its caller waited for.
pub enum Inserted {
    /// Committed (`true`), or not written because the route already had a
    /// task for the message id (`false`).
    Committed(bool),
    /// The writer had not taken it by the deadline: it was taken off the
    /// queue, and nothing of it will be written.
    Withdrawn,
    /// The writer took it but has not said how it went by a second
    /// deadline: it may yet be committed; [`PendingInsert::outcome`] tells.
    Unknown(PendingInsert),
}

/// The rest of a task record's answer (see [`Inserted::Unknown`]).
pub struct PendingInsert(tokio::sync::oneshot::Receiver<Vec<writer::Written>>);

impl PendingInsert {
    /// Waits for the writer to finish the record, however long that takes
    /// (a hand-off waits here, never a client).
    pub async fn outcome(self) -> Result<bool, StoreError> {
        let written = self.0.await.map_err(|_| WriteError::Stopped)?;
        inserted(written)
    }
}

fn inserted(written: Vec<writer::Written>) -> Result<bool, StoreError> {
    match written.into_iter().next() {
        Some(Ok(Some(_))) => Ok(true),
        Some(Ok(None)) => Ok(false),
        Some(Err(e)) => Err(StoreError::Write(e)),
        None => Err(StoreError::Corrupt("a new task was not written".into())),
    }
}

impl TaskInsert {
    /// Waits until the record is committed (the task survives a crash):
    /// `true`, or `false` when the route already had a task for this
    /// message id and nothing was written. A record withdrawn at the
    /// deadline is [`WriteError::Timeout`] (nothing was written).
    pub async fn committed(self) -> Result<bool, StoreError> {
        match self.wait().await? {
            Inserted::Committed(made) => Ok(made),
            Inserted::Withdrawn => Err(StoreError::Write(WriteError::Timeout)),
            Inserted::Unknown(pending) => pending.outcome().await,
        }
    }

    /// Waits for the record for the writer's deadline. If it is not
    /// committed by then, it is withdrawn when the writer has not taken it
    /// (so a caller that gives up never has it written later), else waited
    /// for once more, and then left [`Inserted::Unknown`].
    pub async fn wait(mut self) -> Result<Inserted, StoreError> {
        let deadline = self.writer.deadline();
        for round in 0..2 {
            match tokio::time::timeout(deadline, &mut self.answer).await {
                Ok(Ok(written)) => return inserted(written).map(Inserted::Committed),
                Ok(Err(_)) => return Err(StoreError::Write(WriteError::Stopped)),
                Err(_) if round == 0 && self.writer.withdraw(self.ticket) => {
                    return Ok(Inserted::Withdrawn);
                }
                Err(_) => {}
            }
        }
        Ok(Inserted::Unknown(PendingInsert(self.answer)))
    }
}

/// Handle on the database: the one writer, a thread that commits every
/// write — sessions, tasks and their events — in groups (see [`writer`];
/// SQLite serialises writes anyway, and one writer never waits on another's
/// lock), and a small pool of readers.
#[derive(Clone)]
pub struct Store {
    reader: SqlitePool,
    /// Every write, committed in groups.
    tasks: TaskWriter,
    /// WAL checkpoints, beside the writer.
    checkpointer: Checkpointer,
    /// The WAL's length as checkpoints see it (tests change when the
    /// writer starts it over).
    #[cfg_attr(not(test), allow(dead_code))]
    wal: Arc<wal::WalFrames>,
    /// Bumped after every committed session write (`roostctl events -f`
    /// waits on it: `session_events.rs`).
    session_changes: tokio::sync::watch::Sender<u64>,
    /// De-duplication entries of deleted tasks, until they are cleared.
    sweeps: Arc<message_ids::Sweeps>,
}

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
    /// How long a caller waits for the writer before it gives up (and
    /// withdraws a task record the writer has not taken).
    pub fn write_deadline(&self) -> Duration {
        self.tasks.deadline()
    }

    /// A shorter deadline, for tests that make the writer slow on purpose.
    #[cfg(test)]
    pub fn set_write_deadline(&self, deadline: Duration) {
        self.tasks.set_deadline(deadline);
    }

    /// Makes every event written from now on whose record contains
    /// `marker` fail (a disk error for just those writes), for tests.
    #[cfg(test)]
    pub fn fail_events_containing(db: &Path, marker: &str) {
        let conn = rusqlite::Connection::open(db).expect("open the database");
        conn.execute_batch(&format!(
            "CREATE TRIGGER fail_marked BEFORE INSERT ON task_events \
             WHEN NEW.body_json LIKE '%{marker}%' BEGIN SELECT RAISE(ABORT, 'injected'); END;"
        ))
        .expect("trigger");
    }

    /// Holds the writer's thread for `how_long` once it comes to this
    /// (a disk that hangs), for tests.
    #[cfg(test)]
    pub fn stall_writer(&self, how_long: Duration) {
        self.tasks
            .write_on_thread(Vec::new(), Box::new(move |_| std::thread::sleep(how_long)));
    }

    /// Opens (creating if needed) the database at `path` and applies
    /// migrations; A2A task writes are synced per `durability`.
    pub async fn open(path: &Path, durability: Durability) -> Result<Self, StoreError> {
        private_files(path).map_err(StoreError::Files)?;
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(5));
        // Checkpoints run on a thread of their own (see `checkpoint`), not
        // inside whichever commit happens to cross a threshold.
        let migrator = SqlitePoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            .connect_with(options.clone().pragma("wal_autocheckpoint", "0"))
            .await?;
        sqlx::migrate!("../migrations").run(&migrator).await?;
        migrator.close().await;
        // A local SQLite connection cannot go stale: no ping before each use.
        let reader = SqlitePoolOptions::new()
            .max_connections(4)
            .test_before_acquire(false)
            .connect_with(options.read_only(true))
            .await?;
        let frames = Arc::<wal::WalFrames>::default();
        Ok(Self {
            tasks: TaskWriter::open(path, durability, Arc::clone(&frames))?,
            checkpointer: Checkpointer::open(path)?,
            wal: frames,
            reader,
            session_changes: tokio::sync::watch::Sender::new(0),
            sweeps: Arc::default(),
        })
    }

    /// A store over an existing (migrated) pool on a database file (tests
    /// with `#[sqlx::test]`).
    pub fn from_pool(pool: SqlitePool) -> Result<Self, StoreError> {
        let path = pool.connect_options().get_filename().to_path_buf();
        let frames = Arc::<wal::WalFrames>::default();
        Ok(Self {
            tasks: TaskWriter::open(&path, Durability::Full, Arc::clone(&frames))?,
            checkpointer: Checkpointer::open(&path)?,
            wal: frames,
            reader: pool,
            session_changes: tokio::sync::watch::Sender::new(0),
            sweeps: Arc::default(),
        })
    }

    /// Commits one write and returns its answer (rows it changed, or what
    /// it counted; 0 for none).
    async fn write_one(&self, op: WriteOp) -> Result<u64, StoreError> {
        match self.tasks.write(vec![op]).await?.pop() {
            Some(Ok(answer)) => Ok(answer.unwrap_or(0)),
            Some(Err(e)) => Err(StoreError::Write(e)),
            None => Err(StoreError::Corrupt("a write was not answered".into())),
        }
    }

    /// Copies the WAL back into the database without blocking writers
    /// (PASSIVE), on the checkpoint thread: commits go on meanwhile. It also
    /// runs every second by itself; the daemon calls it at shutdown.
    pub async fn checkpoint(&self) -> Result<(), StoreError> {
        Ok(self.checkpointer.checkpoint().await?)
    }

    pub async fn close(&self) {
        let _ = self.checkpoint().await;
        self.reader.close().await;
    }
}

#[cfg(test)]
mod growth_tests;
#[cfg(test)]
mod list_tests;
#[cfg(test)]
mod message_ids_tests;
#[cfg(test)]
mod tests;
