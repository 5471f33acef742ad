//! A2A tasks and their event logs in the store: recording a task, queueing
//! its events to the task writer, reading tasks and logs back, pruning
//! ended ones.

use sqlx::Row;

use super::writer::{RowChange, WriteOp};
use super::writes::{ENDED, ENDED_COUNT};
use super::{Store, StoreError, TaskInsert, now};
use crate::tasks::model::{
    A2aTask, ANSWER_ARTIFACT, EventKind, TaskEvent, TaskState, message_parts, message_text,
};
use crate::tasks::model::{NewA2aTask, TaskFilter};

impl Store {
    /// Records an A2A task as `submitted`, with its first event, in one
    /// transaction: once this returns, the task survives a crash.
    pub async fn insert_a2a_task(&self, t: &NewA2aTask<'_>) -> Result<A2aTask, StoreError> {
        let (task, insert) = self.queue_a2a_task(t, false, true);
        match insert.committed().await? {
            true => Ok(task),
            false => {
                self.retried_a2a_task((t.route, t.owner), t.message_id)
                    .await
            }
        }
    }

    /// The task a message already made on a route, for a retry of it that
    /// [`TaskInsert::committed`] said was not written.
    pub async fn retried_a2a_task(
        &self,
        (route, owner): (&str, &str),
        message_id: &str,
    ) -> Result<A2aTask, StoreError> {
        self.a2a_task_by_message((route, owner), message_id)
            .await?
            .ok_or_else(|| StoreError::Corrupt("a retried task vanished".into()))
    }

    /// Queues an A2A task's record (as [`Store::insert_a2a_task`] writes
    /// it), committed without lingering (somebody waits for it); the task
    /// survives a crash once [`TaskInsert::committed`] says so, and anything
    /// queued for it later is committed after it. `working`: recorded
    /// `working` in the same commit (the task goes straight to a session
    /// that waits for one), its log `submitted` then `working`.
    /// `dedupe`: a message id the route has a task for writes nothing (see
    /// [`TaskInsert::committed`]).
    pub fn queue_a2a_task(
        &self,
        t: &NewA2aTask<'_>,
        working: bool,
        dedupe: bool,
    ) -> (A2aTask, TaskInsert) {
        let at = now();
        let working_json = working.then(|| {
            serde_json::to_string(&EventKind::Status {
                parts: None,
                state: TaskState::Working,
                message: None,
            })
            .unwrap_or_default()
        });
        let op = WriteOp::Task {
            id: t.id.to_string(),
            session_id: t.session_id.to_string(),
            context_id: t.context_id.to_string(),
            input_bytes: t.text.len() as i64,
            route: t.route.to_string(),
            owner: t.owner.to_string(),
            message_id: t.message_id.to_string(),
            message_json: t.message_json.to_string(),
            at: at.clone(),
            working: working_json,
            dedupe,
            tick: t.tick.map(|(id, at)| (id.to_string(), at)),
        };
        let (reply, answer) = tokio::sync::oneshot::channel();
        let ticket = self.tasks.write_withdrawable(
            vec![op],
            Box::new(move |written| {
                let _ = reply.send(written);
            }),
        );
        let task = A2aTask {
            id: t.id.into(),
            context_id: t.context_id.to_string(),
            session_id: t.session_id.into(),
            route: t.route.to_string(),
            owner: t.owner.to_string(),
            state: if working {
                TaskState::Working
            } else {
                TaskState::Submitted
            },
            text: t.text.to_string(),
            parts: t.parts.to_vec(),
            message_id: t.message_id.to_string(),
            status_message: None,
            status_parts: None,
            answer: None,
            created_at: at.clone(),
            updated_at: at,
        };
        (
            task,
            TaskInsert {
                answer,
                ticket,
                writer: self.tasks.clone(),
            },
        )
    }

    /// Appends an event to a task's log (and applies a status change to the
    /// task) atomically, committed with whatever other events are waiting.
    /// A task that has ended takes no more: `None`.
    pub async fn append_task_event(
        &self,
        task_id: &str,
        kind: &EventKind,
    ) -> Result<Option<TaskEvent>, StoreError> {
        let mut written = self
            .append_task_events(task_id, std::slice::from_ref(kind))
            .await?;
        Ok(written.pop().flatten())
    }

    /// Appends events to a task's log, in order, in one commit; each one as
    /// [`Store::append_task_event`] would (a write that fails fails alone
    /// and makes this an error; one after the task's end is `None`).
    pub async fn append_task_events(
        &self,
        task_id: &str,
        kinds: &[EventKind],
    ) -> Result<Vec<Option<TaskEvent>>, StoreError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.append_task_events_then(task_id, kinds.to_vec(), true, move |written| {
            let _ = reply.send(written);
        });
        StoreError::from_writer(answer).await?
    }

    /// Queues events for a task's log, as [`Store::append_task_events`]
    /// would write them, without waiting: `then` runs with the outcome on
    /// the writer's thread once they are committed, after everything queued
    /// before (so it sees events in log order). Unless `urgent`, the commit
    /// may wait a millisecond for another write to share it.
    pub fn append_task_events_then(
        &self,
        task_id: &str,
        kinds: Vec<EventKind>,
        urgent: bool,
        then: impl FnOnce(Result<Vec<Option<TaskEvent>>, StoreError>) + Send + 'static,
    ) {
        let at = now();
        let events = kinds
            .iter()
            .map(|kind| Ok((event_json(kind)?, row_change(kind))))
            .collect::<Result<Vec<_>, StoreError>>();
        let ops = match events {
            Ok(events) => vec![WriteOp::Events {
                task_id: task_id.to_string(),
                at: at.clone(),
                events,
            }],
            Err(e) => return then(Err(e)),
        };
        self.tasks.write_then(
            ops,
            Box::new(move |written| {
                let events = written
                    .into_iter()
                    .zip(kinds)
                    .map(|(w, kind)| match w {
                        Ok(seq) => Ok(seq.map(|seq| TaskEvent {
                            seq,
                            at: at.clone(),
                            kind,
                        })),
                        Err(e) => Err(StoreError::Write(e)),
                    })
                    .collect();
                then(events);
            }),
            urgent,
        );
    }

    /// Ids of A2A tasks in `states` (all sessions), oldest first; with
    /// `ended_sessions`, only those whose session is no longer live.
    pub async fn a2a_task_ids(
        &self,
        states: &[TaskState],
        ended_sessions: bool,
    ) -> Result<Vec<String>, StoreError> {
        let list = states
            .iter()
            .map(|s| format!("'{}'", s.as_str()))
            .collect::<Vec<_>>()
            .join(", ");
        let ended = if ended_sessions {
            "AND session_id IN (SELECT id FROM sessions WHERE state NOT IN ('starting', 'running'))"
        } else {
            ""
        };
        let sql = format!(
            "SELECT id FROM tasks WHERE source = 'a2a' AND state IN ({list}) {ended} \
             ORDER BY created_at, id"
        );
        Ok(sqlx::query_scalar(&sql).fetch_all(&self.reader).await?)
    }

    /// A session's A2A tasks that were accepted but never started, oldest first.
    pub async fn pending_a2a_tasks(&self, session_id: &str) -> Result<Vec<A2aTask>, StoreError> {
        let sql = format!(
            "SELECT {A2A_COLUMNS} FROM tasks t WHERE t.source = 'a2a' AND t.session_id = ?1 \
             AND t.state = 'submitted' ORDER BY t.created_at, t.id"
        );
        let rows = sqlx::query(&sql)
            .bind(session_id)
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(a2a_from_row).collect()
    }

    /// One A2A task with its last status message.
    pub async fn a2a_task(&self, id: &str) -> Result<Option<A2aTask>, StoreError> {
        let sql = format!("SELECT {A2A_COLUMNS} FROM tasks t WHERE t.id = ?1 AND t.source = 'a2a'");
        let row = sqlx::query(&sql)
            .bind(id)
            .fetch_optional(&self.reader)
            .await?;
        row.map(|r| a2a_from_row(&r)).transpose()
    }

    /// The task a message of `owner` made on a route, if it made one.
    pub async fn a2a_task_by_message(
        &self,
        (route, owner): (&str, &str),
        message_id: &str,
    ) -> Result<Option<A2aTask>, StoreError> {
        let sql = format!(
            "SELECT {A2A_COLUMNS} FROM task_messages m JOIN tasks t ON t.id = m.task_id \
             WHERE m.route = ?1 AND m.owner = ?3 AND m.message_id = ?2 AND t.source = 'a2a'"
        );
        let row = sqlx::query(&sql)
            .bind(route)
            .bind(message_id)
            .bind(owner)
            .fetch_optional(&self.reader)
            .await?;
        row.map(|r| a2a_from_row(&r)).transpose()
    }

    /// Who sent the tasks of a context on a route (the owner of its first
    /// task), if it has any.
    pub async fn context_owner(
        &self,
        route: &str,
        context_id: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT owner FROM tasks WHERE context_id = ?2 AND route = ?1 AND source = 'a2a' \
             LIMIT 1",
        )
        .bind(route)
        .bind(context_id)
        .fetch_optional(&self.reader)
        .await?)
    }

    /// A2A tasks, newest first (by last update), and how many match in all.
    /// Only the filters given are in the statement, so a route's list is
    /// read and counted from `tasks_route_updated` (migration 0019) without
    /// touching the table's other rows, and a page after another starts at
    /// the previous page's last task rather than counting past the rows
    /// before it: a page deep in the list costs what the first does.
    pub async fn a2a_tasks(&self, f: &TaskFilter<'_>) -> Result<(Vec<A2aTask>, u64), StoreError> {
        let list = ListSql::new(f);
        let mut rows = sqlx::query(&list.page);
        for value in &list.binds {
            rows = rows.bind(*value);
        }
        let rows = rows.fetch_all(&self.reader).await?;
        let mut total = sqlx::query_scalar::<_, i64>(&list.count);
        for value in &list.count_binds {
            total = total.bind(*value);
        }
        let total = total.fetch_one(&self.reader).await?;
        let tasks = rows.iter().map(a2a_from_row).collect::<Result<_, _>>()?;
        Ok((tasks, total.max(0) as u64))
    }

    /// Deletes ended A2A tasks (and their logs) that ended before
    /// `ended_before` or are older than the newest `keep` ended ones, in
    /// batches of [`super::writes::PRUNE_BATCH`], each one job of the task
    /// writer's: task writes queued meanwhile wait for one small delete at
    /// most. Returns how many were deleted.
    pub async fn prune_a2a_tasks(
        &self,
        ended_before: Option<&str>,
        keep: Option<u64>,
    ) -> Result<u64, StoreError> {
        // Each bound as the (ended_at, id) the tasks to delete come before:
        // the age bound's time, or just after the newest of the tasks past
        // `keep` (ids are all the same length, so `id` + NUL sorts right
        // after `id` and before every other id). Found here, on a reader,
        // once: walking in the writer would hold every task write behind
        // it for each batch.
        let by_age = ended_before.map(|at| (at.to_string(), String::new()));
        let by_count = match keep {
            Some(keep) => self
                .newest_beyond(keep)
                .await?
                .map(|(at, id)| (at, format!("{id}\0"))),
            None => None,
        };
        // Whichever bound reaches further.
        let Some(before) = by_age.max(by_count) else {
            return Ok(0);
        };
        let mut total = 0;
        loop {
            let op = WriteOp::Prune {
                before: before.clone(),
            };
            let deleted = self.write_one(op).await?;
            total += deleted;
            if deleted < u64::from(super::writes::PRUNE_BATCH) {
                self.tasks_gone(total);
                // The deletes stand whatever the sweep does: a failed one
                // is tried again after the next.
                if let Err(error) = self.sweep_if_due().await {
                    tracing::warn!(%error, "de-duplication entries of gone tasks not cleared");
                }
                return Ok(total);
            }
        }
    }

    /// The newest of the ended A2A tasks beyond the newest `keep` (its
    /// `ended_at` and id: it and those before it are what `max_count` =
    /// `keep` deletes), or `None` if no more than `keep` have ended.
    ///
    /// How many have ended comes from `task_counts` (kept by triggers in
    /// each task write's transaction), so the walk is from the oldest over
    /// the tasks to delete alone, not past the `keep` retained (at a
    /// million, ~5 ms against ~0.4 s: BENCHMARKS.md, issue 36). One
    /// statement, so the count and the walk read one snapshot: a delete
    /// between them (a `roostctl prune` meanwhile) cannot move the walk
    /// into the tasks kept. This counts on every task in an ended state
    /// having its `ended_at` (the writes set both in one statement;
    /// `list_tests.rs` checks the count against the index).
    pub async fn newest_beyond(&self, keep: u64) -> Result<Option<(String, String)>, StoreError> {
        // SQLite takes a negative OFFSET as 0: the WHERE keeps it from
        // naming the oldest task when no more than `keep` have ended.
        let found = sqlx::query_as::<_, (String, String)>(&format!(
            "SELECT ended_at, id FROM tasks WHERE {ENDED} AND ({ENDED_COUNT}) > ?1 \
             ORDER BY ended_at, id LIMIT 1 OFFSET ({ENDED_COUNT}) - ?1 - 1"
        ))
        .bind(i64::try_from(keep).unwrap_or(i64::MAX))
        .fetch_optional(&self.reader)
        .await?;
        Ok(found)
    }

    /// How many ended A2A tasks ended before `ended_before` (what
    /// [`Store::prune_a2a_tasks`] would delete for it alone).
    pub async fn count_ended_a2a_tasks(&self, ended_before: &str) -> Result<u64, StoreError> {
        let count: i64 = sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM tasks WHERE {ENDED} AND ended_at < ?1"
        ))
        .bind(ended_before)
        .fetch_one(&self.reader)
        .await?;
        Ok(count.max(0) as u64)
    }

    /// A task's events after `after` (0: all), in order.
    pub async fn task_events(
        &self,
        task_id: &str,
        after: u64,
    ) -> Result<Vec<TaskEvent>, StoreError> {
        let rows = sqlx::query(
            "SELECT seq, body_json, at FROM task_events WHERE task_id = ?1 AND seq > ?2 ORDER BY seq",
        )
        .bind(task_id)
        .bind(i64::try_from(after).unwrap_or(i64::MAX))
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|r| {
                let body: String = r.try_get("body_json")?;
                Ok(TaskEvent {
                    seq: r.try_get::<i64, _>("seq")?.max(0) as u64,
                    at: r.try_get("at")?,
                    kind: serde_json::from_str(&body)
                        .map_err(|e| StoreError::Corrupt(format!("task event: {e}")))?,
                })
            })
            .collect()
    }
}

/// A list's two statements: its page and its count, with only the filters
/// given (a `?` that may be NULL would keep SQLite off the index).
pub(super) struct ListSql<'a> {
    pub(super) page: String,
    pub(super) binds: Vec<&'a str>,
    pub(super) count: String,
    pub(super) count_binds: Vec<&'a str>,
}

impl<'a> ListSql<'a> {
    /// A route's list is read in order from `tasks_route_updated` and
    /// counted from `task_counts`; a context's (few tasks) read and counted
    /// from `tasks_context`, which holds the other filters' columns too
    /// (migration 0021; named: with no statistics SQLite would walk the
    /// route's index instead).
    pub(super) fn new(f: &TaskFilter<'a>) -> Self {
        let by_context = f.context_id.is_some();
        let table = if by_context {
            "tasks t INDEXED BY tasks_context"
        } else {
            "tasks t"
        };
        let mut cond = String::from("t.source = 'a2a'");
        let mut binds: Vec<&str> = Vec::new();
        for (column, value) in [
            ("t.context_id", f.context_id),
            ("t.route", f.route),
            ("t.state", f.state.map(TaskState::as_str)),
            ("t.owner", f.owner),
        ] {
            if let Some(value) = value {
                binds.push(value);
                cond.push_str(&format!(" AND {column} = ?{}", binds.len()));
            }
        }
        let (count, count_binds) = match f.route {
            Some(route) if !by_context => {
                let mut sql =
                    String::from("SELECT COALESCE(SUM(n), 0) FROM task_counts WHERE route = ?1");
                let mut binds = vec![route];
                for (column, value) in [
                    ("state", f.state.map(TaskState::as_str)),
                    ("owner", f.owner),
                ] {
                    if let Some(value) = value {
                        binds.push(value);
                        sql.push_str(&format!(" AND {column} = ?{}", binds.len()));
                    }
                }
                (sql, binds)
            }
            _ => (
                format!("SELECT COUNT(*) FROM {table} WHERE {cond}"),
                binds.clone(),
            ),
        };
        let mut page = cond;
        if let Some((updated_at, id)) = f.after {
            binds.extend([updated_at, id]);
            let n = binds.len();
            page.push_str(&format!(" AND (t.updated_at, t.id) < (?{}, ?{n})", n - 1));
        }
        Self {
            page: format!(
                "SELECT {A2A_COLUMNS} FROM {table} WHERE {page} \
                 ORDER BY t.updated_at DESC, t.id DESC LIMIT {} OFFSET {}",
                f.limit, f.offset
            ),
            binds,
            count,
            count_binds,
        }
    }
}

const A2A_COLUMNS: &str = "t.id, t.context_id, t.session_id, t.route, t.owner, t.state, t.message_json, \
     t.answer, t.created_at, t.updated_at, \
     (SELECT body_json FROM task_events e WHERE e.task_id = t.id AND body_json LIKE '{\"type\":\"status\"%' \
      ORDER BY seq DESC LIMIT 1) AS last_status";

fn a2a_from_row(row: &sqlx::sqlite::SqliteRow) -> Result<A2aTask, StoreError> {
    let state: String = row.try_get("state")?;
    let message: Option<String> = row.try_get("message_json")?;
    let message: serde_json::Value = message
        .as_deref()
        .and_then(|m| serde_json::from_str(m).ok())
        .unwrap_or_default();
    let last: Option<String> = row.try_get("last_status")?;
    let (status_message, status_parts) = last
        .and_then(|b| serde_json::from_str::<EventKind>(&b).ok())
        .map_or((None, None), |k| match k {
            EventKind::Status { message, parts, .. } => (message, parts),
            _ => (None, None),
        });
    Ok(A2aTask {
        id: row.try_get::<String, _>("id")?.into(),
        context_id: row.try_get("context_id")?,
        session_id: row.try_get::<String, _>("session_id")?.into(),
        route: row.try_get("route")?,
        owner: row.try_get("owner")?,
        state: TaskState::parse(&state)
            .ok_or_else(|| StoreError::Corrupt(format!("task state '{state}'")))?,
        text: message_text(&message),
        parts: message_parts(&message),
        message_id: message["messageId"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        status_message,
        status_parts,
        answer: row.try_get("answer")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

/// What an event changes in its task's row: a status its state (and error,
/// end); the whole answer its answer.
fn row_change(kind: &EventKind) -> RowChange {
    match kind {
        EventKind::Status { state, message, .. } => RowChange::Status {
            state: state.as_str(),
            message: message.clone(),
            fails: matches!(state, TaskState::Failed | TaskState::Rejected),
            ends: state.is_terminal(),
        },
        EventKind::Artifact {
            artifact_id,
            text,
            append: false,
            ..
        } if artifact_id == ANSWER_ARTIFACT => RowChange::Answer(text.clone()),
        _ => RowChange::None,
    }
}

fn event_json(kind: &EventKind) -> Result<String, StoreError> {
    serde_json::to_string(kind).map_err(|e| StoreError::Corrupt(e.to_string()))
}
