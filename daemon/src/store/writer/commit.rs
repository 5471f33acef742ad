//! Where the task writer's queue is committed: on its thread, or on the
//! caller's own thread when the writer is idle — a lone request's commit
//! then costs no hop to the thread and back (two thread wake-ups each;
//! measured in BENCHMARKS.md, issue 36).
//!
//! One lock, [`Conn`], is the right to commit: whoever holds it takes what
//! is queued and commits it, so commits (and the `then` of each job) keep
//! the order the jobs were queued in, whichever thread makes them. A caller
//! only tries the lock: it never waits for the writer on its own thread.
//! Retention's jobs are apart from that order: the thread alone commits
//! them, each in a commit of its own, when nothing else is queued or one
//! has waited long (`Backlog::take`).
//!
//! A synced commit (`store.sync: full`) waits for the disk. A caller makes
//! one only when no other caller waits (else they share the thread's sync)
//! and its runtime has another worker to go on serving connections; the
//! lock admits one committer, so the disk holds one worker at most.

use std::sync::{PoisonError, TryLockError};
use std::time::Instant;

use rusqlite::Connection;

use super::super::push_writes;
use super::super::wal;
use super::super::writes::{apply, exec};
use super::{Inner, Queued, Then, WRITES_PER_COMMIT, WriteError, WriteOp, Written};
use crate::store::Durability;

/// The writer's connection and what its commits need to know.
pub(in crate::store) struct Conn {
    conn: Connection,
    /// With `store.sync: full` only: whether commits are synced now.
    synced: Option<bool>,
    /// WAL frames past which the next checkpoint runs on the thread.
    next_checkpoint: u64,
}

impl Conn {
    /// `conn` was opened with `durability`'s `synchronous` level: with
    /// `full` its commits are synced from the first (whoever makes it: a
    /// caller that came before the thread first took the lock included).
    pub(super) fn new(conn: Connection, durability: Durability, restart_at: u64) -> Self {
        Self {
            conn,
            synced: (durability == Durability::Full).then_some(true),
            next_checkpoint: restart_at,
        }
    }

    /// Syncs this group's commit, or not: a group with no durable write
    /// commits without a sync (see [`WriteOp::durable`]); SQLite syncs the
    /// WAL up to the next synced commit, so an unsynced write never
    /// outlives a synced one after it.
    fn sync_for(&mut self, group: &[(Vec<WriteOp>, Then)]) {
        let Some(now) = self.synced else { return };
        let want = group
            .iter()
            .any(|(ops, _)| ops.iter().any(WriteOp::durable));
        if want != now {
            let level = if want {
                "PRAGMA synchronous = FULL"
            } else {
                "PRAGMA synchronous = NORMAL"
            };
            if exec(&self.conn, level).is_ok() {
                self.synced = Some(want);
            }
        }
    }

    /// What follows a commit: the push deliverer woken if it queued
    /// deliveries, and past `restart_at` frames a checkpoint, so the WAL
    /// starts over (see `checkpointer.rs`) — run by the thread only (a few
    /// ms and two syncs): a caller's commit asks the thread for it.
    fn after(&mut self, shared: &Inner, on_thread: bool) {
        if push_writes::take_queued() {
            shared.pushes.notify_one();
        }
        let (now, every) = (shared.frames.get(), shared.frames.restart_at());
        if now < every {
            self.next_checkpoint = every;
            return;
        }
        if now < self.next_checkpoint {
            return;
        }
        if !on_thread {
            let mut q = shared.queue();
            q.checkpoint = true;
            if q.thread_waits.is_some() {
                shared.wake.notify_one();
            }
            return;
        }
        // Once per `every` frames while the WAL does not start over (a
        // reader on an old snapshot can keep a checkpoint from its end).
        self.next_checkpoint = now.saturating_add(every);
        let started = Instant::now();
        let r = wal::passive(&self.conn);
        tracing::debug!(
            frames = now,
            took_us = started.elapsed().as_micros() as u64,
            "WAL checkpoint on the writer"
        );
        if let Err(error) = r {
            tracing::warn!(%error, "WAL checkpoint on the writer failed");
        }
    }
}

/// Commits `job`, with whatever is queued before it, on the calling thread
/// if nobody is committing, the group fits one commit, callers are not
/// crowding in (`Backlog::crowded`; measured: without that rule, at 16 and
/// 128 clients, commits on callers' threads made 12–19 % fewer req/s than
/// group commits on the thread, with twice the p99 at 128), and, if the
/// group is synced, nobody else waits for a commit and the thread may wait
/// for the disk ([`may_sync_here`]); otherwise gives it back to be queued
/// for the thread. Its `then` (and those of the jobs taken with it) run
/// here, before this returns.
pub(super) fn here(shared: &Inner, job: Queued) -> Option<Queued> {
    let mut c = match shared.conn.try_lock() {
        Ok(c) => c,
        Err(TryLockError::Poisoned(c)) => c.into_inner(),
        Err(TryLockError::WouldBlock) => return Some(job),
    };
    let mut group = {
        let mut q = shared.queue();
        let syncs = c.synced.is_some() && (job.durable() || q.jobs.iter().any(Queued::durable));
        if syncs && q.urgent {
            // Another caller waits too: they share the thread's sync (and
            // the next few commits go there as well).
            q.crowded = super::CROWDED;
            return Some(job);
        }
        if q.crowded > 0
            || (syncs && !may_sync_here())
            || q.count + job.writes() > WRITES_PER_COMMIT
        {
            return Some(job);
        }
        q.count += job.writes();
        q.jobs.push_back(job);
        q.take(false)
    };
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        c.sync_for(&group);
        commit(&c.conn, &mut group);
        c.after(shared, false);
    }));
    if let Err(panic) = ran {
        tracing::error!(panic = %said(&*panic), "a write panicked: the writes in hand failed");
        let _ = c.conn.execute_batch("ROLLBACK");
    }
    None
}

/// Whether this thread may wait for a synced commit: a thread outside any
/// runtime, or a worker of a runtime with another worker to serve its
/// connections meanwhile (the connection's lock admits one committer, so
/// the disk holds one worker at most). Not a runtime's only thread.
fn may_sync_here() -> bool {
    use tokio::runtime::{Handle, RuntimeFlavor};
    Handle::try_current().map_or(true, |h| {
        h.runtime_flavor() == RuntimeFlavor::MultiThread && h.metrics().num_workers() >= 2
    })
}

/// The thread: [`run`], picked up again after a panic (the jobs of the
/// group in hand are dropped unanswered, so their callers hear `Stopped`).
pub(super) fn serve(shared: &Inner) {
    loop {
        {
            // Set again after a panic, whatever the panic left.
            let mut c = shared.conn();
            c.synced = (shared.durability == Durability::Full
                && exec(&c.conn, "PRAGMA synchronous = FULL").is_ok())
            .then_some(true);
        }
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(shared)));
        match ran {
            Ok(()) => return,
            Err(panic) => {
                tracing::error!(panic = %said(&*panic), "the task writer panicked: the writes in hand failed; it goes on");
                // A transaction the panic left open is undone.
                let _ = shared.conn().conn.execute_batch("ROLLBACK");
                shared.queue().thread_waits = None;
            }
        }
    }
}

/// What a panic said.
fn said(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// Commits what is queued once a job is urgent or the oldest has lingered
/// long enough (up to [`WRITES_PER_COMMIT`] writes at a time), and runs the
/// checkpoints a caller's commit asked for.
fn run(shared: &Inner) {
    loop {
        {
            let mut q = shared.queue();
            loop {
                let now = Instant::now();
                let due = q.lazy_since.map(|since| since + super::LINGER);
                // Retention's jobs wake it only when nothing else is
                // queued: queued writes that linger keep their `LINGER`
                // (and, urgent or due, are taken first anyway).
                let work = q.urgent
                    || (!q.background.is_empty() && q.jobs.is_empty())
                    || q.checkpoint
                    || q.count >= WRITES_PER_COMMIT
                    || due.is_some_and(|due| due <= now);
                if work {
                    break;
                }
                if q.closed {
                    if q.jobs.is_empty() && q.background.is_empty() {
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
        }
        // The right to commit first, then the jobs: a caller committing on
        // its own thread meanwhile took those queued before its own.
        let mut c = shared.conn();
        let mut group = shared.queue().take(true);
        if !group.is_empty() {
            c.sync_for(&group);
            commit(&c.conn, &mut group);
        }
        c.after(shared, true);
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
            Ok(written.into_iter().map(Ok).collect())
        })
        .collect::<rusqlite::Result<Vec<_>>>()
        .and_then(|results| exec(conn, "COMMIT").map(|()| results));
    if applied.is_err() {
        // A failed COMMIT may leave the transaction open.
        let _ = exec(conn, "ROLLBACK");
    }
    applied
}

/// Each answer of a job that was not written (for good: its task's events
/// have a hole, which its end must not hide).
fn failed(ops: &[WriteOp], e: rusqlite::Error) -> Vec<Written> {
    for op in ops {
        if let WriteOp::Events { task_id, .. } = op {
            super::super::writes::lost::mark(task_id);
        }
    }
    let e = WriteError::Sql(std::sync::Arc::new(e));
    ops.iter()
        .flat_map(|op| std::iter::repeat_n(Err(e.clone()), op.answers()))
        .collect()
}
