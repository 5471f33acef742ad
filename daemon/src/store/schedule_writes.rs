//! The schedule writes the task writer applies, as SQL: a schedule made,
//! removed, paused or resumed, a tick passed over, a capsule's own
//! replaced; and a fired tick, recorded in the transaction of its task
//! (`writes.rs` calls [`record_tick`]).

use rusqlite::{Connection, params};

use crate::schedules::model::Schedule;

/// A schedule write on the task writer.
pub(super) enum ScheduleWrite {
    /// Answers 0 when the route already has a schedule of that name.
    Add(Box<Schedule>),
    /// Answers the rows deleted.
    Remove { id: String },
    /// Paused, or resumed with the ticks that passed meanwhile passed over
    /// (`now_ms` becomes its last tick when it is later than that).
    Pause {
        id: String,
        paused: bool,
        now_ms: i64,
    },
    /// A tick passed over (overlap, missed while down, the route not
    /// taking tasks): counted, with why.
    Passed {
        id: String,
        tick_ms: i64,
        error: String,
    },
    /// A route's schedules from its capsule's manifest, replacing the ones
    /// it had (same name: kept with its ticks; others made; missing ones
    /// removed).
    Manifest {
        route: String,
        schedules: Vec<Schedule>,
    },
}

impl ScheduleWrite {
    /// What a client is told happened is synced; the scheduler's own
    /// bookkeeping rides the next sync.
    pub(super) fn durable(&self) -> bool {
        !matches!(self, Self::Passed { .. } | Self::Manifest { .. })
    }
}

/// Applies a schedule write (on the writer's thread, in its transaction).
pub(super) fn apply(conn: &Connection, write: &ScheduleWrite) -> rusqlite::Result<u64> {
    Ok(match write {
        ScheduleWrite::Add(s) => insert(conn, s, "INSERT OR IGNORE")? as u64,
        ScheduleWrite::Remove { id } => conn
            .prepare_cached("DELETE FROM schedules WHERE id = ?1")?
            .execute(params![id])? as u64,
        ScheduleWrite::Pause { id, paused, now_ms } => {
            conn.prepare_cached(
                "UPDATE schedules SET paused = ?2, last_tick_ms = CASE WHEN ?2 THEN last_tick_ms \
                 ELSE MAX(COALESCE(last_tick_ms, created_ms), ?3) END WHERE id = ?1",
            )?
            .execute(params![id, paused, now_ms])? as u64
        }
        ScheduleWrite::Passed { id, tick_ms, error } => {
            conn.prepare_cached(
                "UPDATE schedules SET last_tick_ms = ?2, skipped = skipped + 1, last_error = ?3 \
                 WHERE id = ?1 AND COALESCE(last_tick_ms, -1) < ?2",
            )?
            .execute(params![id, tick_ms, error])? as u64
        }
        ScheduleWrite::Manifest { route, schedules } => {
            let names: Vec<&str> = schedules.iter().map(|s| s.name.as_str()).collect();
            let mut removed = 0;
            let mut stale = conn.prepare_cached(
                "SELECT id, name FROM schedules WHERE route = ?1 AND origin = 'manifest'",
            )?;
            let gone: Vec<String> = stale
                .query_map(params![route], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
                })?
                .filter_map(Result::ok)
                .filter(|(_, name)| !names.contains(&name.as_str()))
                .map(|(id, _)| id)
                .collect();
            for id in gone {
                removed += conn
                    .prepare_cached("DELETE FROM schedules WHERE id = ?1")?
                    .execute(params![id])?;
            }
            for s in schedules {
                let changed = conn
                    .prepare_cached(
                        "UPDATE schedules SET origin = 'manifest', text = ?3, context_id = ?4, \
                         cron = ?5, tz = ?6, every = ?7, at = ?8, missed = ?9, overlap = ?10 \
                         WHERE route = ?1 AND name = ?2",
                    )?
                    .execute(params![
                        s.route,
                        s.name,
                        s.text,
                        s.context_id,
                        s.times.cron,
                        s.times.tz,
                        s.times.every,
                        s.times.at,
                        s.missed.as_str(),
                        s.overlap.as_str()
                    ])?;
                if changed == 0 {
                    insert(conn, s, "INSERT")?;
                }
            }
            removed as u64
        }
    })
}

fn insert(conn: &Connection, s: &Schedule, verb: &str) -> rusqlite::Result<usize> {
    conn.prepare_cached(&format!(
        "{verb} INTO schedules (id, route, name, origin, text, context_id, cron, tz, every, at, \
         missed, overlap, paused, created_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"
    ))?
    .execute(params![
        s.id,
        s.route,
        s.name,
        s.origin.as_str(),
        s.text,
        s.context_id,
        s.times.cron,
        s.times.tz,
        s.times.every,
        s.times.at,
        s.missed.as_str(),
        s.overlap.as_str(),
        s.paused,
        s.created_ms
    ])
}

/// A tick fired, in the transaction that records its task (or finds the
/// task an earlier attempt at the tick made): it is the schedule's last.
pub(super) fn record_tick(
    conn: &Connection,
    schedule_id: &str,
    tick_ms: i64,
    task_id: &str,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE schedules SET last_tick_ms = ?2, last_task_id = ?3, fired = fired + 1, \
         last_error = NULL WHERE id = ?1 AND COALESCE(last_tick_ms, -1) < ?2",
    )?
    .execute(params![schedule_id, tick_ms, task_id])?;
    Ok(())
}
