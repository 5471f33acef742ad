//! The push writes the task writer applies, as SQL: a config made (with
//! the deliveries of what its task has logged so far) or deleted, and the
//! outbox's bookkeeping; and the deliveries queued with each event
//! (`writes.rs` calls [`enqueue`] in the event's transaction).

use std::cell::Cell;

use rusqlite::{Connection, params};

use super::now;
use crate::tasks::model::{PushConfig, PushMade};

/// A push write on the task writer.
pub(super) enum PushWrite {
    /// Adds (or replaces) a config of a task that exists and has fewer
    /// than `max` others; `backfill`: its events logged so far are queued
    /// for it too. Answers [`PushMade`] as a number.
    Create {
        config: PushConfig,
        backfill: bool,
        max: u32,
    },
    /// Answers the configs deleted (0 or 1).
    Delete { task_id: String, id: String },
    /// A delivery done (or given up): its row goes.
    Done { outbox_id: i64 },
    /// A delivery to try again at `next_at` (unix ms).
    Retry {
        outbox_id: i64,
        next_at: i64,
        error: String,
    },
}

impl PushWrite {
    /// Whether a client is told it happened (configs), rather than what a
    /// redelivery would repeat (the outbox's bookkeeping).
    pub(super) fn durable(&self) -> bool {
        matches!(self, PushWrite::Create { .. } | PushWrite::Delete { .. })
    }
}

/// What the writer's count for a made config means.
pub(super) fn push_made(n: u64) -> PushMade {
    match n {
        0 => PushMade::NoTask,
        1 => PushMade::Made,
        _ => PushMade::Full,
    }
}

/// Unix milliseconds now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

thread_local! {
    /// Deliveries were queued since [`take_queued`] last looked (only the
    /// writer's thread writes here; a rolled-back transaction leaves it set,
    /// which costs the deliverer one look).
    static QUEUED: Cell<bool> = const { Cell::new(false) };
}

/// Whether deliveries were queued since the last call (the writer asks
/// after each commit, and wakes the deliverer).
pub(super) fn take_queued() -> bool {
    QUEUED.with(|q| q.replace(false))
}

/// Applies a push write (on the writer's thread, in its transaction).
pub(super) fn apply(conn: &Connection, write: &PushWrite) -> rusqlite::Result<u64> {
    Ok(match write {
        PushWrite::Create {
            config: c,
            backfill,
            max,
        } => {
            // Counted in the transaction that adds it: two creates at once
            // cannot both pass the limit.
            let others: u32 = conn
                .prepare_cached(
                    "SELECT COUNT(*) FROM push_configs WHERE task_id = ?1 AND id != ?2",
                )?
                .query_row(params![c.task_id.as_str(), c.id], |row| row.get(0))?;
            if others >= *max {
                return Ok(2);
            }
            let made = conn
                .prepare_cached(
                    "INSERT OR REPLACE INTO push_configs (task_id, id, url, token, auth_scheme, \
                     auth_credentials, created_at, version) SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8 \
                     WHERE EXISTS (SELECT 1 FROM tasks WHERE id = ?1)",
                )?
                .execute(params![
                    c.task_id.as_str(),
                    c.id,
                    c.url,
                    c.token,
                    c.auth_scheme,
                    c.auth_credentials,
                    now(),
                    c.version.as_str()
                ])?;
            if made > 0 && *backfill {
                let queued = conn
                    .prepare_cached(
                        "INSERT INTO push_outbox (task_id, config_id, event_seq, next_at) \
                         SELECT task_id, ?2, seq, ?3 FROM task_events WHERE task_id = ?1 \
                         ORDER BY seq",
                    )?
                    .execute(params![c.task_id.as_str(), c.id, now_ms()])?;
                if queued > 0 {
                    QUEUED.with(|q| q.set(true));
                }
            }
            made as u64
        }
        PushWrite::Delete { task_id, id } => conn
            .prepare_cached("DELETE FROM push_configs WHERE task_id = ?1 AND id = ?2")?
            .execute(params![task_id, id])? as u64,
        PushWrite::Done { outbox_id } => conn
            .prepare_cached("DELETE FROM push_outbox WHERE id = ?1")?
            .execute(params![outbox_id])? as u64,
        PushWrite::Retry {
            outbox_id,
            next_at,
            error,
        } => conn
            .prepare_cached(
                "UPDATE push_outbox SET attempts = attempts + 1, next_at = ?2, last_error = ?3 \
                 WHERE id = ?1",
            )?
            .execute(params![outbox_id, next_at, error])? as u64,
    })
}

/// Queues deliveries of a task's events `first..=last` to each of its
/// configs (in the transaction that logs them; nothing when it has none).
pub(super) fn enqueue(
    conn: &Connection,
    task_id: &str,
    first: i64,
    last: i64,
) -> rusqlite::Result<()> {
    let queued = conn
        .prepare_cached(
            "INSERT INTO push_outbox (task_id, config_id, event_seq, next_at) \
             SELECT c.task_id, c.id, e.seq, ?4 FROM push_configs c \
             JOIN task_events e ON e.task_id = c.task_id \
             WHERE c.task_id = ?1 AND e.seq BETWEEN ?2 AND ?3 ORDER BY c.id, e.seq",
        )?
        .execute(params![task_id, first, last, now_ms()])?;
    if queued > 0 {
        QUEUED.with(|q| q.set(true));
    }
    Ok(())
}
