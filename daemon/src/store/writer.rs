//! The task writer: one OS thread that owns a SQLite connection and commits
//! A2A tasks and their events in groups, and runs the WAL checkpoints.
//!
//! Why a thread of its own: every A2A request makes three or more commits, one
//! after another. Through sqlx each statement, `BEGIN` and `COMMIT` is a
//! round trip to sqlx's worker thread (and `BEGIN`/`COMMIT` two); here a whole
//! group is one hop in and one hop out. Checkpoints run here too, between
//! groups, so they always see the end of the WAL and SQLite can start the
//! WAL over from the top instead of growing the file under steady load.

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use tokio::sync::oneshot;

/// Most writes one transaction takes.
const WRITES_PER_COMMIT: usize = 256;

/// How long writes nobody waits for (a task's streamed updates) may wait for
/// a write somebody does, to share its commit. Streams see updates this much
/// later at most; a task that streams and then ends makes one commit.
const LINGER: Duration = Duration::from_millis(1);

/// One write: a new task (its first event comes with it, migration 0006),
/// an event of a task, or a task's end.
pub(super) enum WriteOp {
    Task {
        id: String,
        session_id: String,
        context_id: String,
        input_bytes: i64,
        route: String,
        message_json: String,
        at: String,
    },
    Event {
        task_id: String,
        body: String,
        at: String,
        /// What the event changes in the task's row.
        row: RowChange,
    },
    /// A task's end and use, added to its session's totals (atomically).
    Finish(TaskEndRow),
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
pub(super) type Written = Result<Option<u64>, String>;

/// What runs on the writer's thread once a job's writes are committed (or
/// failed), in commit order.
pub(super) type Then = Box<dyn FnOnce(Result<Vec<Written>, String>) + Send>;

enum Job {
    /// Writes committed together, answered together, in order.
    Writes {
        ops: Vec<WriteOp>,
        then: Then,
        /// Somebody waits for it: commit now.
        urgent: bool,
    },
    /// Copy the WAL back into the database (PASSIVE).
    Checkpoint {
        reply: oneshot::Sender<Result<(), String>>,
    },
}

/// Handle on the writer thread; the thread ends when the last handle is dropped.
#[derive(Clone)]
pub(super) struct TaskWriter(mpsc::Sender<Job>);

impl TaskWriter {
    /// Opens a connection to the (migrated) database at `path` and starts the thread.
    pub(super) fn open(path: &Path) -> Result<Self, String> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        conn.busy_timeout(Duration::from_secs(5))
            .and_then(|()| {
                conn.execute_batch(
                    "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
                     PRAGMA foreign_keys = ON; PRAGMA wal_autocheckpoint = 0; \
                     PRAGMA temp_store = MEMORY;",
                )
            })
            .map_err(|e| format!("cannot set up {}: {e}", path.display()))?;
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("roost-store".into())
            .spawn(move || run(conn, rx))
            .map_err(|e| format!("cannot start the task writer: {e}"))?;
        Ok(Self(tx))
    }

    /// Commits `ops` (with whatever else is waiting) and answers for each, in order.
    pub(super) async fn write(&self, ops: Vec<WriteOp>) -> Result<Vec<Written>, String> {
        let (reply, answer) = oneshot::channel();
        self.write_then(
            ops,
            Box::new(move |written| {
                let _ = reply.send(written);
            }),
            true,
        );
        answer.await.map_err(|_| STOPPED.to_string())?
    }

    /// Queues `ops`; `then` runs on the writer's thread with the answers once
    /// they are committed, after every job queued before it. Not `urgent`:
    /// the commit may wait up to [`LINGER`] for company.
    pub(super) fn write_then(&self, ops: Vec<WriteOp>, then: Then, urgent: bool) {
        if let Err(mpsc::SendError(job)) = self.0.send(Job::Writes { ops, then, urgent })
            && let Job::Writes { then, .. } = job
        {
            then(Err(STOPPED.to_string()));
        }
    }

    /// Runs a PASSIVE checkpoint between groups.
    pub(super) async fn checkpoint(&self) -> Result<(), String> {
        let (reply, answer) = oneshot::channel();
        self.0
            .send(Job::Checkpoint { reply })
            .map_err(|_| STOPPED.to_string())?;
        answer.await.map_err(|_| STOPPED.to_string())?
    }
}

pub(super) const STOPPED: &str = "the task writer has stopped";

/// The thread: takes what is waiting (up to a limit), commits it as one
/// transaction, answers, and again. A group of writes nobody waits for
/// lingers a little for one somebody does.
fn run(conn: Connection, rx: mpsc::Receiver<Job>) {
    let mut group: Vec<(Vec<WriteOp>, Then)> = Vec::new();
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        let (mut count, mut urgent) = (0, false);
        let mut linger_until = None;
        loop {
            while let Some(job) = next.take() {
                match job {
                    Job::Writes {
                        ops,
                        then,
                        urgent: u,
                    } => {
                        count += ops.len();
                        urgent |= u;
                        group.push((ops, then));
                    }
                    // What came before it is committed first.
                    Job::Checkpoint { reply } => {
                        commit(&conn, &mut group);
                        let _ = reply.send(checkpoint(&conn));
                    }
                }
                if count < WRITES_PER_COMMIT {
                    next = rx.try_recv().ok();
                }
            }
            if urgent || group.is_empty() || count >= WRITES_PER_COMMIT {
                break;
            }
            let until = *linger_until.get_or_insert_with(|| Instant::now() + LINGER);
            match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(job) => next = Some(job),
                Err(_) => break,
            }
        }
        commit(&conn, &mut group);
    }
}

/// Commits the group in one transaction (a single write needs none) and
/// answers each job, in order. A write that fails fails alone (SQLite undoes
/// the statement, not the transaction); a failed commit fails them all.
fn commit(conn: &Connection, group: &mut Vec<(Vec<WriteOp>, Then)>) {
    if group.is_empty() {
        return;
    }
    let single = group.len() == 1 && group[0].0.len() == 1;
    let results: Vec<Vec<Written>> = if single {
        group
            .iter()
            .map(|(ops, _)| vec![apply(conn, &ops[0])])
            .collect()
    } else {
        // Cached statements: `BEGIN`/`COMMIT` are not parsed again per group.
        match exec(conn, "BEGIN IMMEDIATE") {
            Ok(()) => {
                let results: Vec<Vec<Written>> = group
                    .iter()
                    .map(|(ops, _)| ops.iter().map(|op| apply(conn, op)).collect())
                    .collect();
                match exec(conn, "COMMIT") {
                    Ok(()) => results,
                    Err(e) => {
                        let _ = exec(conn, "ROLLBACK");
                        fail_all(group, &e)
                    }
                }
            }
            Err(e) => fail_all(group, &e),
        }
    };
    for ((_, then), written) in group.drain(..).zip(results) {
        then(Ok(written));
    }
}

fn fail_all(group: &[(Vec<WriteOp>, Then)], e: &rusqlite::Error) -> Vec<Vec<Written>> {
    group
        .iter()
        .map(|(ops, _)| ops.iter().map(|_| Err(e.to_string())).collect())
        .collect()
}

fn apply(conn: &Connection, op: &WriteOp) -> Written {
    let done = match op {
        WriteOp::Finish(end) => return finish(conn, end),
        WriteOp::Task {
            id,
            session_id,
            context_id,
            input_bytes,
            route,
            message_json,
            at,
        } => conn
            .prepare_cached(
                "INSERT INTO tasks (id, session_id, context_id, source, state, input_bytes, \
                 created_at, updated_at, route, message_json) \
                 VALUES (?1, ?2, ?3, 'a2a', 'submitted', ?4, ?5, ?5, ?6, ?7)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    id,
                    session_id,
                    context_id,
                    input_bytes,
                    at,
                    route,
                    message_json
                ])
            })
            .map(|_| Some(1)),
        // The event and its row change, both or neither.
        WriteOp::Event {
            task_id,
            body,
            at,
            row,
        } => return event(conn, task_id, body, at, row),
    };
    done.map(|seq| seq.map(|s| s.max(0) as u64))
        .map_err(|e| e.to_string())
}

/// Appends an event to its task's log (numbered after the last) unless the
/// task has ended, and applies its change to the task's row: both or
/// neither. (No `NOT IN` list: SQLite would build a temporary table for it
/// each time.)
fn event(conn: &Connection, task_id: &str, body: &str, at: &str, row: &RowChange) -> Written {
    savepoint(conn, || {
        let seq = conn
            .prepare_cached(
                "INSERT INTO task_events (task_id, seq, body_json, at) \
                 SELECT ?1, COALESCE((SELECT MAX(seq) FROM task_events WHERE task_id = ?1), \
                 0) + 1, ?2, ?3 FROM tasks WHERE id = ?1 \
                 AND state <> 'completed' AND state <> 'failed' AND state <> 'canceled' \
                 AND state <> 'rejected' RETURNING seq",
            )?
            .query_row(params![task_id, body, at], |r| r.get::<_, i64>(0))
            .optional()?;
        match (seq, row) {
            (None, _) | (_, RowChange::None) => {}
            (
                Some(_),
                RowChange::Status {
                    state,
                    message,
                    fails,
                    ends,
                },
            ) => {
                conn.prepare_cached(
                    "UPDATE tasks SET state = ?1, \
                     error = CASE WHEN ?2 THEN ?3 ELSE error END, updated_at = ?4, \
                     ended_at = CASE WHEN ?5 THEN ?4 ELSE ended_at END WHERE id = ?6",
                )?
                .execute(params![state, fails, message, at, ends, task_id])?;
            }
            (Some(_), RowChange::Answer(text)) => {
                conn.prepare_cached("UPDATE tasks SET answer = ?1, updated_at = ?2 WHERE id = ?3")?
                    .execute(params![text, at, task_id])?;
            }
        }
        Ok(seq.map(|s| s.max(0) as u64))
    })
}

/// Runs `body` inside a savepoint (a transaction of its own outside a
/// group's): all of its changes or none.
fn savepoint(conn: &Connection, body: impl FnOnce() -> rusqlite::Result<Option<u64>>) -> Written {
    exec(conn, "SAVEPOINT write").map_err(|e| e.to_string())?;
    match body() {
        Ok(seq) => exec(conn, "RELEASE write")
            .map(|()| seq)
            .map_err(|e| e.to_string()),
        Err(e) => {
            let _ = exec(conn, "ROLLBACK TO write").and_then(|()| exec(conn, "RELEASE write"));
            Err(e.to_string())
        }
    }
}

/// Runs a parameterless statement, prepared once.
fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

/// A task's end: both rows or neither (a savepoint, inside a group's
/// transaction or not).
fn finish(conn: &Connection, end: &TaskEndRow) -> Written {
    let (input, output) = (end.input_tokens, end.output_tokens);
    savepoint(conn, || {
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
        Ok(None)
    })
}

fn checkpoint(conn: &Connection) -> Result<(), String> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
        .map_err(|e| format!("WAL checkpoint: {e}"))
}
