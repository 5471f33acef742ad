//! The task writer: one OS thread that owns a SQLite connection and commits
//! A2A tasks and their events in groups, and runs the WAL checkpoints.
//!
//! Why a thread of its own: through sqlx each statement, `BEGIN` and
//! `COMMIT` is a round trip to sqlx's worker thread (and `BEGIN`/`COMMIT`
//! two); here a whole group is one hop in and one hop out. Checkpoints run
//! here too, between groups, so they always see the end of the WAL and
//! SQLite can start the WAL over from the top instead of growing the file
//! under steady load.
//!
//! What it costs per write is kept small: a task's events in one job are
//! numbered with one lookup and change the task's row with one update; no
//! savepoints or triggers (each makes SQLite copy every page it touches into
//! a statement journal first). A write that fails undoes its group, and the
//! group's jobs are tried again one by one, so it fails alone.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use tokio::sync::oneshot;

/// Most writes one transaction takes.
const WRITES_PER_COMMIT: usize = 256;

/// How long writes nobody waits for (a task's streamed updates) may wait for
/// a write somebody does, to share its commit. Streams see updates this much
/// later at most; a task that streams and then ends makes one commit.
const LINGER: Duration = Duration::from_millis(1);

/// One write: a new task (with its first event, `submitted`), events of a
/// task, or a task's end.
pub(super) enum WriteOp {
    /// Recorded unless a task with the same message id exists on the
    /// route (then its answer is `None` and nothing is written).
    Task {
        id: String,
        session_id: String,
        context_id: String,
        input_bytes: i64,
        route: String,
        message_id: String,
        message_json: String,
        at: String,
    },
    /// Events of one task, in order, each with what it changes in the
    /// task's row; one answer each.
    Events {
        task_id: String,
        at: String,
        events: Vec<(String, RowChange)>,
    },
    /// A task's end and use, added to its session's totals (atomically).
    Finish(TaskEndRow),
}

impl WriteOp {
    /// How many answers (and rows of the log or the tasks table) it makes.
    fn answers(&self) -> usize {
        match self {
            WriteOp::Events { events, .. } => events.len(),
            _ => 1,
        }
    }
}

/// A task's end as written.
pub(super) struct TaskEndRow {
    pub id: String,
    pub session_id: String,
    pub state: Option<String>,
    pub error: Option<String>,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub turns: u32,
    pub at: String,
}

/// What an event changes in its task's row (migration 0007).
pub(super) enum RowChange {
    None,
    /// A state change: its message is the task's error when it `fails`
    /// (failed, rejected); it `ends` the task (a terminal state).
    Status {
        state: &'static str,
        message: Option<String>,
        fails: bool,
        ends: bool,
    },
    /// The whole answer.
    Answer(String),
}

/// What a write did: the event's sequence number (`None`: its task has
/// ended and took no more), or why it failed.
pub(super) type Written = Result<Option<u64>, WriteError>;

/// Why the task writer did not do what it was asked.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WriteError {
    #[error("cannot open {}: {source}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: Arc<rusqlite::Error>,
    },
    #[error("cannot start the task writer: {0}")]
    Thread(#[source] Arc<std::io::Error>),
    #[error("the task writer has stopped")]
    Stopped,
    /// A statement of the write's transaction failed (and the write with it).
    #[error("{0}")]
    Sql(#[source] Arc<rusqlite::Error>),
    #[error("WAL checkpoint: {0}")]
    Checkpoint(#[source] Arc<rusqlite::Error>),
}

/// What runs on the writer's thread with a job's answers once its writes are
/// committed (or failed), in commit order.
pub(super) type Then = Box<dyn FnOnce(Vec<Written>) + Send>;

/// A job waiting for a commit.
struct Queued {
    ops: Vec<WriteOp>,
    then: Then,
    urgent: bool,
}

impl Queued {
    /// Its writes, as [`WRITES_PER_COMMIT`] counts them.
    fn writes(&self) -> usize {
        self.ops.iter().map(WriteOp::answers).sum()
    }
}

/// What waits for the writer, under one lock.
#[derive(Default)]
struct Backlog {
    jobs: VecDeque<Queued>,
    /// Writes in `jobs`.
    count: usize,
    /// Some job in `jobs` is urgent.
    urgent: bool,
    /// When the oldest job nobody waits for was queued.
    lazy_since: Option<Instant>,
    checkpoints: Vec<oneshot::Sender<Result<(), WriteError>>>,
    /// The thread waits on `wake`: `Some(true)` until a deadline (a lazy
    /// group's), `Some(false)` for good.
    thread_waits: Option<bool>,
    /// A runtime timer will wake the thread for the lazy jobs.
    timer_armed: bool,
    /// The last handle is gone: finish what is queued and stop.
    closed: bool,
}

struct Inner {
    queue: Mutex<Backlog>,
    wake: Condvar,
}

impl Inner {
    fn queue(&self) -> MutexGuard<'_, Backlog> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes up to [`WRITES_PER_COMMIT`] writes off the queue, oldest first.
    fn take(&self) -> Vec<(Vec<WriteOp>, Then)> {
        let mut q = self.queue();
        let mut group = Vec::new();
        let mut count = 0;
        while count < WRITES_PER_COMMIT
            && let Some(job) = q.jobs.pop_front()
        {
            count += job.writes();
            group.push((job.ops, job.then));
        }
        q.count -= count;
        if q.jobs.is_empty() {
            q.urgent = false;
            q.lazy_since = None;
        } else {
            q.urgent = q.jobs.iter().any(|j| j.urgent);
        }
        group
    }
}

/// Handle on the writer; the thread ends when the last handle is dropped.
#[derive(Clone)]
pub(super) struct TaskWriter(Arc<Handle>);

struct Handle(Arc<Inner>);

impl Drop for Handle {
    fn drop(&mut self) {
        self.0.queue().closed = true;
        self.0.wake.notify_one();
    }
}

impl TaskWriter {
    /// Opens a connection to the (migrated) database at `path` and starts the thread.
    pub(super) fn open(path: &Path) -> Result<Self, WriteError> {
        let open = |e| WriteError::Open {
            path: path.to_path_buf(),
            source: Arc::new(e),
        };
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(open)?;
        conn.busy_timeout(Duration::from_secs(5))
            .and_then(|()| {
                conn.execute_batch(
                    "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
                     PRAGMA foreign_keys = ON; PRAGMA wal_autocheckpoint = 0; \
                     PRAGMA temp_store = MEMORY;",
                )
            })
            .map_err(open)?;
        let shared = Arc::new(Inner {
            queue: Mutex::new(Backlog::default()),
            wake: Condvar::new(),
        });
        let thread = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("roost-store".into())
            .spawn(move || run(&thread, &conn))
            .map_err(|e| WriteError::Thread(Arc::new(e)))?;
        Ok(Self(Arc::new(Handle(shared))))
    }

    /// Commits `ops` (with whatever else is waiting) and answers for each, in order.
    pub(super) async fn write(&self, ops: Vec<WriteOp>) -> Result<Vec<Written>, WriteError> {
        let (reply, answer) = oneshot::channel();
        self.write_then(
            ops,
            Box::new(move |written| {
                let _ = reply.send(written);
            }),
            true,
        );
        answer.await.map_err(|_| WriteError::Stopped)
    }

    /// Queues `ops`; `then` runs on the thread with the answers once they
    /// are committed, after every job queued before it.
    ///
    /// `urgent`: somebody waits for it; the thread is woken if it sleeps.
    /// Not `urgent`: the commit may wait up to [`LINGER`] for company, and
    /// the thread is not woken for it (a runtime timer does that if no
    /// urgent job brings it along sooner): a lone blocking request then
    /// makes one hand-off to the thread instead of two.
    pub(super) fn write_then(&self, ops: Vec<WriteOp>, then: Then, urgent: bool) {
        let shared = &self.0.0;
        let mut q = shared.queue();
        let job = Queued { ops, then, urgent };
        q.count += job.writes();
        q.jobs.push_back(job);
        if urgent {
            q.urgent = true;
            // Awake, it takes this next with whatever else came in meanwhile
            // (under load, commits grow instead of multiplying).
            if q.thread_waits.is_some() {
                shared.wake.notify_one();
            }
            return;
        }
        q.lazy_since.get_or_insert_with(Instant::now);
        if q.thread_waits != Some(false) || q.timer_armed {
            // The thread is at work, or waits with a deadline, or a timer
            // will wake it.
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                q.timer_armed = true;
                rt.spawn(linger_timer(Arc::clone(shared)));
            }
            Err(_) => shared.wake.notify_one(),
        }
    }

    /// Runs a PASSIVE checkpoint on the thread, after what is queued.
    pub(super) async fn checkpoint(&self) -> Result<(), WriteError> {
        let (reply, answer) = oneshot::channel();
        let shared = &self.0.0;
        shared.queue().checkpoints.push(reply);
        shared.wake.notify_one();
        answer.await.map_err(|_| WriteError::Stopped)?
    }
}

/// Wakes the thread once the oldest lazy job has waited [`LINGER`], unless
/// somebody has committed it by then.
async fn linger_timer(shared: Arc<Inner>) {
    let _disarm = Disarm(Arc::clone(&shared));
    loop {
        let due = match shared.queue().lazy_since {
            Some(since) if since + LINGER > Instant::now() => since + LINGER,
            _ => return,
        };
        tokio::time::sleep_until(due.into()).await;
    }
}

/// However a linger timer ends (due, or dropped with its runtime), the
/// thread hears of lazy jobs still queued: none waits on a timer that will
/// not fire.
struct Disarm(Arc<Inner>);

impl Drop for Disarm {
    fn drop(&mut self) {
        let mut q = self.0.queue();
        q.timer_armed = false;
        if q.lazy_since.is_some() && q.thread_waits.is_some() {
            self.0.wake.notify_one();
        }
    }
}

/// The thread: commits what is queued once a job is urgent or the oldest
/// has lingered long enough (up to [`WRITES_PER_COMMIT`] writes at a time),
/// and runs the checkpoints between commits.
fn run(shared: &Inner, conn: &Connection) {
    loop {
        let checkpoints = {
            let mut q = shared.queue();
            loop {
                let now = Instant::now();
                let due = q.lazy_since.map(|since| since + LINGER);
                let work = q.urgent
                    || q.count >= WRITES_PER_COMMIT
                    || due.is_some_and(|due| due <= now)
                    || !q.checkpoints.is_empty();
                if work {
                    break;
                }
                if q.closed {
                    if q.jobs.is_empty() {
                        return;
                    }
                    break;
                }
                q.thread_waits = Some(due.is_some());
                q = match due {
                    Some(due) => {
                        shared
                            .wake
                            .wait_timeout(q, due - now)
                            .unwrap_or_else(PoisonError::into_inner)
                            .0
                    }
                    None => shared.wake.wait(q).unwrap_or_else(PoisonError::into_inner),
                };
                q.thread_waits = None;
            }
            std::mem::take(&mut q.checkpoints)
        };
        // What came before a checkpoint is committed first.
        commit(conn, &mut shared.take());
        for reply in checkpoints {
            let _ = reply.send(checkpoint(conn));
        }
    }
}

/// Commits the group in one transaction and answers each job, in order.
/// If any write fails, the transaction is undone and each job is tried again
/// in a transaction of its own, so a write that fails fails its job alone
/// (and a job is all written or not at all).
fn commit(conn: &Connection, group: &mut Vec<(Vec<WriteOp>, Then)>) {
    if group.is_empty() {
        return;
    }
    let results = match transaction(conn, group.iter().map(|(ops, _)| ops)) {
        Ok(results) => results,
        Err(e) if group.len() == 1 => vec![failed(&group[0].0, e)],
        Err(_) => group
            .iter()
            .map(|(ops, _)| match transaction(conn, std::iter::once(ops)) {
                Ok(mut one) => one.pop().unwrap_or_default(),
                Err(e) => failed(ops, e),
            })
            .collect(),
    };
    for ((_, then), written) in group.drain(..).zip(results) {
        then(written);
    }
}

/// Applies each job's writes in one transaction: all of them, or (`Err`) none.
fn transaction<'a>(
    conn: &Connection,
    jobs: impl Iterator<Item = &'a Vec<WriteOp>>,
) -> rusqlite::Result<Vec<Vec<Written>>> {
    // Cached statements: `BEGIN`/`COMMIT` are not parsed again per group.
    exec(conn, "BEGIN IMMEDIATE")?;
    let applied = jobs
        .map(|ops| {
            let mut written = Vec::with_capacity(ops.len());
            for op in ops {
                apply(conn, op, &mut written)?;
            }
            Ok(written)
        })
        .collect::<rusqlite::Result<Vec<_>>>()
        .and_then(|results| exec(conn, "COMMIT").map(|()| results));
    if applied.is_err() {
        // A failed COMMIT may leave the transaction open.
        let _ = exec(conn, "ROLLBACK");
    }
    applied
}

/// Each answer of a job that was not written.
fn failed(ops: &[WriteOp], e: rusqlite::Error) -> Vec<Written> {
    let e = WriteError::Sql(Arc::new(e));
    ops.iter()
        .flat_map(|op| std::iter::repeat_n(Err(e.clone()), op.answers()))
        .collect()
}

/// The body of a task's first event.
const SUBMITTED: &str = r#"{"type":"status","state":"submitted"}"#;

/// Applies one write, pushing its answers onto `out`.
fn apply(conn: &Connection, op: &WriteOp, out: &mut Vec<Written>) -> rusqlite::Result<()> {
    let written = match op {
        WriteOp::Finish(end) => {
            finish(conn, end)?;
            None
        }
        WriteOp::Task {
            id,
            session_id,
            context_id,
            input_bytes,
            route,
            message_id,
            message_json,
            at,
        } => {
            // Writes are serial here, so the lookup and the insert cannot
            // interleave with another attempt of the same message.
            let seen: Option<String> = conn
                .prepare_cached(
                    "SELECT id FROM tasks WHERE route = ?1 AND message_id = ?2 LIMIT 1",
                )?
                .query_row(params![route, message_id], |row| row.get(0))
                .optional()?;
            if seen.is_some() {
                out.push(Ok(None));
                return Ok(());
            }
            conn.prepare_cached(
                "INSERT INTO tasks (id, session_id, context_id, source, state, input_bytes, \
                 created_at, updated_at, route, message_json, message_id) \
                 VALUES (?1, ?2, ?3, 'a2a', 'submitted', ?4, ?5, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                id,
                session_id,
                context_id,
                input_bytes,
                at,
                route,
                message_json,
                message_id
            ])?;
            conn.prepare_cached(
                "INSERT INTO task_events (task_id, seq, body_json, at) VALUES (?1, 1, ?2, ?3)",
            )?
            .execute(params![id, SUBMITTED, at])?;
            Some(1)
        }
        WriteOp::Events {
            task_id,
            at,
            events,
        } => return append(conn, task_id, at, events, out),
    };
    out.push(Ok(written));
    Ok(())
}

/// Appends events to their task's log, numbered after the last, until the
/// task has ended (`None` for each event after), and applies their changes
/// to the task's row in one update.
fn append(
    conn: &Connection,
    task_id: &str,
    at: &str,
    events: &[(String, RowChange)],
    out: &mut Vec<Written>,
) -> rusqlite::Result<()> {
    let found = conn
        .prepare_cached(
            "SELECT state IN ('completed', 'failed', 'canceled', 'rejected'), \
             COALESCE((SELECT MAX(seq) FROM task_events WHERE task_id = ?1), 0) \
             FROM tasks WHERE id = ?1",
        )?
        .query_row(params![task_id], |r| {
            Ok((r.get::<_, bool>(0)?, r.get::<_, i64>(1)?))
        })
        .optional()?;
    let (mut ended, mut seq) = found.unwrap_or((true, 0));
    // The row's change: its last state, error and answer. (Nothing is
    // written for a task that had already ended, so `ended` then says
    // whether these events end it.)
    let (mut state, mut error, mut answer) = (None, None, None);
    for (body, row) in events {
        if ended {
            out.push(Ok(None));
            continue;
        }
        seq += 1;
        conn.prepare_cached(
            "INSERT INTO task_events (task_id, seq, body_json, at) VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(params![task_id, seq, body, at])?;
        out.push(Ok(Some(seq.max(0) as u64)));
        match row {
            RowChange::None => {}
            RowChange::Status {
                state: s,
                message,
                fails,
                ends: e,
            } => {
                state = Some(*s);
                if *fails {
                    error = Some(message.as_deref());
                }
                ended |= *e;
            }
            RowChange::Answer(text) => answer = Some(text.as_str()),
        }
    }
    if state.is_some() || answer.is_some() {
        conn.prepare_cached(
            "UPDATE tasks SET state = COALESCE(?1, state), \
             error = CASE WHEN ?2 THEN ?3 ELSE error END, answer = COALESCE(?4, answer), \
             updated_at = ?5, ended_at = CASE WHEN ?6 THEN ?5 ELSE ended_at END WHERE id = ?7",
        )?
        .execute(params![
            state,
            error.is_some(),
            error.flatten(),
            answer,
            at,
            ended,
            task_id
        ])?;
    }
    Ok(())
}

/// Runs a parameterless statement, prepared once.
fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

/// A task's end and use, added to its session's totals.
fn finish(conn: &Connection, end: &TaskEndRow) -> rusqlite::Result<()> {
    let (input, output) = (end.input_tokens, end.output_tokens);
    conn.prepare_cached(
        "UPDATE tasks SET state = COALESCE(?1, state), error = COALESCE(?2, error), \
         input_tokens = ?3, output_tokens = ?4, turns = ?5, updated_at = ?6, \
         ended_at = COALESCE(ended_at, ?6) WHERE id = ?7",
    )?
    .execute(params![
        end.state, end.error, input, output, end.turns, end.at, end.id
    ])?;
    conn.prepare_cached(
        "UPDATE sessions SET input_tokens = input_tokens + ?1, \
         output_tokens = output_tokens + ?2, turns = turns + ?3 WHERE id = ?4",
    )?
    .execute(params![input, output, end.turns, end.session_id])?;
    Ok(())
}

fn checkpoint(conn: &Connection) -> Result<(), WriteError> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
        .map_err(|e| WriteError::Checkpoint(Arc::new(e)))
}
