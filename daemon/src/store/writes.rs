//! The writes the task writer applies, as SQL: a new task with its first
//! event (unless its message already made one on the route), events that
//! keep their task's row in step, a task's end with its use, and a batch of
//! retention deletes. Each runs inside the writer's group transaction.

use rusqlite::{Connection, OptionalExtension, params};

/// The states an A2A task ends in, as SQL.
macro_rules! ended_states {
    () => {
        "('completed', 'failed', 'canceled', 'rejected')"
    };
}

/// Most ended tasks one retention delete removes (one job of its own,
/// committed alone when no task write waits: a task write that comes while
/// it is being committed waits for a small delete at most). Measured at
/// 300,000 tasks: 100 a batch cost more a task (37 µs, 10.1 KiB against
/// 34 µs, 7.5 KiB) and gained nothing at 16 clients.
pub(super) const PRUNE_BATCH: u32 = 200;

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
        /// The client that sent it ('' for a route's one token).
        owner: String,
        message_id: String,
        message_json: String,
        at: String,
        /// Recorded `working` at once, with this event (its JSON) after
        /// `submitted`: the task goes straight to a waiting session.
        working: Option<String>,
        /// Look for a task with the same message id first.
        dedupe: bool,
        /// The schedule tick (schedule id, unix ms) it fires: recorded as
        /// the schedule's last in this transaction.
        tick: Option<(String, i64)>,
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
    /// Deletes up to [`PRUNE_BATCH`] ended A2A tasks (their logs cascade)
    /// that come before `before`, an `(ended_at, id)` bound; answers how
    /// many. (The bound is found on a reader: the writer does no more than
    /// the deletes.)
    Prune { before: (String, String) },
    /// Deletes de-duplication entries whose tasks a reader found gone
    /// (route, owner, message id, the task it named): an entry that names
    /// another task by now (its message came again) stays. Answers how
    /// many went.
    ForgetMessages(Vec<[String; 4]>),
    /// Deletes up to [`PRUNE_BATCH`] tasks of a session that is not live
    /// (A2A ones in any state, their logs cascading); answers how many.
    PruneSessionTasks { session_id: String },
    /// Deletes a session that is not live (`starting`, `running`) with its
    /// events and what tasks it has left; answers 1, or 0 when it is live
    /// or gone.
    DeleteSession { id: String },
    /// A session row's change; answers the rows it changed, and leaves
    /// the row as changed in the record, if one is given.
    Session(
        super::session_writes::SessionWrite,
        Option<super::session_writes::Record>,
    ),
    /// A push config's change, or the outbox's bookkeeping.
    Push(super::push_writes::PushWrite),
    /// A schedule's change, or a tick passed over.
    Schedule(super::schedule_writes::ScheduleWrite),
    /// An agent's conversation in a context, replaced.
    Conversation(super::conversation_writes::SaveConversation),
    /// A write statement that changes nothing, committed: proves the
    /// writer thread answers and the database takes writes (`/readyz`).
    Probe,
    /// Panics on the thread (tests of its recovery).
    #[cfg(test)]
    Panic,
    /// Holds its commit this long (tests of who waits for a slow disk);
    /// durable, as a task's write is.
    #[cfg(test)]
    Stall(std::time::Duration),
}

impl WriteOp {
    /// Whether its commit must reach the disk before it is answered (with
    /// `store.sync: full`): a task's record, events and end (what clients
    /// are told) are; a session's record and retention deletes are not —
    /// they are synced with the next commit that is, or the next checkpoint.
    pub(super) fn durable(&self) -> bool {
        match self {
            WriteOp::Push(write) => write.durable(),
            WriteOp::Schedule(write) => write.durable(),
            _ => !matches!(
                self,
                WriteOp::Session(..)
                    | WriteOp::Conversation(_)
                    | WriteOp::Prune { .. }
                    | WriteOp::ForgetMessages(_)
                    | WriteOp::PruneSessionTasks { .. }
                    | WriteOp::DeleteSession { .. }
                    | WriteOp::Probe
            ),
        }
    }

    /// Whether it is background work: a batch of retention's deletes (or
    /// `roostctl prune`'s), of an ended session's tasks (`roostctl rm`,
    /// session retention), or of de-duplication entries whose tasks are
    /// gone. No client's task waits for it, so the writer commits it alone,
    /// when no other write waits (`writer.rs`, `Backlog::take`). Each is
    /// safe in any order with the other writes: it deletes only ended
    /// tasks, or the tasks of a session its own statement finds not live,
    /// and an entry only while it still names its gone task.
    pub(super) fn background(&self) -> bool {
        matches!(
            self,
            WriteOp::Prune { .. } | WriteOp::ForgetMessages(_) | WriteOp::PruneSessionTasks { .. }
        )
    }

    /// How many answers (and rows of the log or the tasks table) it makes.
    pub(super) fn answers(&self) -> usize {
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

/// The body of a task's first event.
const SUBMITTED: &str = r#"{"type":"status","state":"submitted"}"#;

/// Applies one write, pushing its answers onto `out`.
pub(super) fn apply(
    conn: &Connection,
    op: &WriteOp,
    out: &mut Vec<Option<u64>>,
) -> rusqlite::Result<()> {
    let written = match op {
        WriteOp::Finish(end) => {
            finish(conn, end)?;
            None
        }
        WriteOp::Prune { before } => Some(prune(conn, before)?),
        WriteOp::ForgetMessages(entries) => {
            let mut forget = conn.prepare_cached(
                "DELETE FROM task_messages WHERE route = ?1 AND owner = ?2 AND message_id = ?3 \
                 AND task_id = ?4",
            )?;
            let mut gone = 0;
            for [route, owner, message_id, task_id] in entries {
                gone += forget.execute(params![route, owner, message_id, task_id])? as u64;
            }
            Some(gone)
        }
        WriteOp::PruneSessionTasks { session_id } => Some(
            conn.prepare_cached(
                "DELETE FROM tasks WHERE id IN (SELECT id FROM tasks WHERE session_id = ?1 \
                 AND NOT EXISTS (SELECT 1 FROM sessions WHERE id = ?1 \
                 AND state IN ('starting', 'running')) LIMIT ?2)",
            )?
            .execute(params![session_id, PRUNE_BATCH])? as u64,
        ),
        WriteOp::Session(write, record) => {
            let changed = super::session_writes::apply(conn, write)?;
            if let Some(record) = record {
                record.fill(conn)?;
            }
            Some(changed)
        }
        WriteOp::Push(write) => Some(super::push_writes::apply(conn, write)?),
        WriteOp::Schedule(write) => Some(super::schedule_writes::apply(conn, write)?),
        WriteOp::Conversation(save) => Some(super::conversation_writes::save(conn, save)?),
        WriteOp::DeleteSession { id } => Some(
            conn.prepare_cached(
                "DELETE FROM sessions WHERE id = ?1 AND state NOT IN ('starting', 'running')",
            )?
            .execute(params![id])? as u64,
        ),
        WriteOp::Probe => Some(
            conn.prepare_cached("DELETE FROM sessions WHERE 0")?
                .execute([])? as u64,
        ),
        #[cfg(test)]
        WriteOp::Panic => panic!("a write that panics"),
        #[cfg(test)]
        WriteOp::Stall(long) => {
            std::thread::sleep(*long);
            None
        }
        WriteOp::Task {
            id,
            session_id,
            context_id,
            input_bytes,
            route,
            owner,
            message_id,
            message_json,
            at,
            working,
            dedupe,
            tick,
        } => {
            // Writes are serial here, so the lookup and the insert cannot
            // interleave with another attempt of the same message. An
            // entry whose task is gone (retention) finds nothing.
            let seen: Option<String> = match dedupe {
                true => conn
                    .prepare_cached(
                        "SELECT m.task_id FROM task_messages m WHERE m.route = ?1 \
                         AND m.owner = ?3 AND m.message_id = ?2 \
                         AND EXISTS (SELECT 1 FROM tasks t WHERE t.id = m.task_id)",
                    )?
                    .query_row(params![route, message_id, owner], |row| row.get(0))
                    .optional()?,
                false => None,
            };
            if let Some(seen) = seen {
                if let Some((schedule, tick_ms)) = tick {
                    super::schedule_writes::record_tick(conn, schedule, *tick_ms, &seen)?;
                }
                out.push(None);
                return Ok(());
            }
            conn.prepare_cached(
                "INSERT INTO tasks (id, session_id, context_id, source, state, input_bytes, \
                 created_at, updated_at, route, message_json, owner) \
                 VALUES (?1, ?2, ?3, 'a2a', ?8, ?4, ?5, ?5, ?6, ?7, ?9)",
            )?
            .execute(params![
                id,
                session_id,
                context_id,
                input_bytes,
                at,
                route,
                message_json,
                if working.is_some() {
                    "working"
                } else {
                    "submitted"
                },
                owner,
            ])?;
            // The message's entry names its first task still stored: one
            // whose task is gone is taken over; one whose task is there
            // (the message came again with de-duplication off) stays.
            conn.prepare_cached(
                "INSERT INTO task_messages (route, owner, message_id, task_id) \
                 VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (route, owner, message_id) DO UPDATE SET task_id = excluded.task_id \
                 WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.id = task_messages.task_id)",
            )?
            .execute(params![route, owner, message_id, id])?;
            let mut event = conn.prepare_cached(
                "INSERT INTO task_events (task_id, seq, body_json, at) VALUES (?1, ?2, ?3, ?4)",
            )?;
            event.execute(params![id, 1, SUBMITTED, at])?;
            if let Some(body) = working {
                event.execute(params![id, 2, body, at])?;
            }
            if let Some((schedule, tick_ms)) = tick {
                super::schedule_writes::record_tick(conn, schedule, *tick_ms, id)?;
            }
            Some(1)
        }
        WriteOp::Events {
            task_id,
            at,
            events,
        } => return append(conn, task_id, at, events, out),
    };
    out.push(written);
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
    out: &mut Vec<Option<u64>>,
) -> rusqlite::Result<()> {
    let found = conn
        .prepare_cached(concat!(
            "SELECT state IN ",
            ended_states!(),
            ", COALESCE((SELECT MAX(seq) FROM task_events WHERE task_id = ?1), 0) \
                 FROM tasks WHERE id = ?1"
        ))?
        .query_row(params![task_id], |r| {
            Ok((r.get::<_, bool>(0)?, r.get::<_, i64>(1)?))
        })
        .optional()?;
    let (mut ended, mut seq) = found.unwrap_or((true, 0));
    // A task some of whose events were not stored does not end completed:
    // its log, and so its answer, has a hole (the caller records it failed).
    let completes = events.iter().any(|(_, row)| {
        matches!(
            row,
            RowChange::Status {
                state: "completed",
                ..
            }
        )
    });
    if completes && !ended && lost::has(task_id) {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CONSTRAINT),
            Some(lost::REFUSED.into()),
        ));
    }
    // The row's change: its last state, error and answer. (Nothing is
    // written for a task that had already ended, so `ended` then says
    // whether these events end it.)
    let (mut state, mut error, mut answer) = (None, None, None);
    let first = seq + 1;
    for (body, row) in events {
        if ended {
            out.push(None);
            continue;
        }
        seq += 1;
        conn.prepare_cached(
            "INSERT INTO task_events (task_id, seq, body_json, at) VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(params![task_id, seq, body, at])?;
        out.push(Some(seq.max(0) as u64));
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
    if ended {
        lost::forget(task_id);
    }
    if seq >= first {
        // Deliveries to the task's push configs, with the events.
        super::push_writes::enqueue(conn, task_id, first, seq)?;
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
pub(super) fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
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

/// One batch of retention deletes (see [`WriteOp::Prune`]): the oldest
/// ended tasks before the bound.
pub(super) fn prune(conn: &Connection, (at, id): &(String, String)) -> rusqlite::Result<u64> {
    let deleted = conn
        .prepare_cached(&prune_statement())?
        .execute(params![at, id, PRUNE_BATCH])?;
    Ok(deleted as u64)
}

/// Retention's delete: up to [`PRUNE_BATCH`] ended A2A tasks before
/// `(?1, ?2)` (`ended_at`, `id`), oldest first.
pub(super) fn prune_statement() -> String {
    format!(
        "DELETE FROM tasks WHERE id IN (SELECT id FROM tasks WHERE {ENDED} \
         AND (ended_at, id) < (?1, ?2) ORDER BY ended_at, id LIMIT ?3)"
    )
}

/// How many A2A tasks are in a state they end in, from `task_counts`.
pub(super) const ENDED_COUNT: &str = concat!(
    "SELECT COALESCE(SUM(n), 0) FROM task_counts WHERE state IN ",
    ended_states!()
);

/// Ended A2A tasks, as `tasks_ended` indexes them.
pub(super) const ENDED: &str = concat!(
    "source = 'a2a' AND ended_at IS NOT NULL AND state IN ",
    ended_states!()
);

/// Tasks some of whose events the writer failed to store, until they end
/// (only the writer's thread reads or writes it).
pub(super) mod lost {
    use std::cell::RefCell;
    use std::collections::HashSet;

    /// What the end of such a task is refused with.
    pub const REFUSED: &str =
        "the task's earlier events were not all stored: it cannot end completed";

    thread_local! {
        static LOST: RefCell<HashSet<String>> = RefCell::new(HashSet::new());
    }

    /// Events of `task_id` failed for good.
    pub fn mark(task_id: &str) {
        LOST.with(|l| l.borrow_mut().insert(task_id.to_string()));
    }

    pub fn has(task_id: &str) -> bool {
        LOST.with(|l| l.borrow().contains(task_id))
    }

    /// It has ended: nothing more to refuse.
    pub fn forget(task_id: &str) {
        LOST.with(|l| {
            if !l.borrow().is_empty() {
                l.borrow_mut().remove(task_id);
            }
        });
    }
}
